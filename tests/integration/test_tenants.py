"""Tenants on every job (OJS multi-tenancy §5): ``meta.tenant_id`` and ``X-OJS-Tenant``,
the 400 of a conflict and the 422 of ``OJS_TENANT_REQUIRED``, the tenant column, the
tenants of API keys (enqueue, fetch, read, cancel), workflows, cron, the tasks backend,
the current tenant, and the admin API's and Django admin's tenants."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

import django_ojs
from django_ojs import apikeys, lifecycle, tenancy
from django_ojs.exceptions import TenantRequired, ValidationError
from django_ojs.models import Job, Tenant
from django_ojs.tasks import OJSBackend
from tests.integration.api_support import OJSClient, assert_ojs_error, client

pytestmark = pytest.mark.django_db

JOB = {"type": "t.run", "args": [], "options": {"queue": "tq"}}


def keyed(scope: str, *tenants: str) -> OJSClient:
    return OJSClient(apikeys.create(f"{scope}-{'-'.join(tenants)}", scope, tenants=tenants)[1])


def test_meta_tenant_id_is_validated_and_stored_in_the_tenant_column():
    job = django_ojs.enqueue("t.run", [], meta={"tenant_id": "acme-corp:eu.1"})
    assert Job.objects.get(pk=job.id).tenant == "acme-corp:eu.1"
    assert django_ojs.enqueue("t.run", []).tenant == ""
    for bad in ("", "-acme", "a b", "ünï", 42, "x" * 256):
        with pytest.raises(ValidationError) as caught:
            django_ojs.enqueue("t.run", [], meta={"tenant_id": bad})
        assert caught.value.details.get("field", "meta.tenant_id") == "meta.tenant_id"
    assert Job.objects.count() == 2


def test_the_header_fills_meta_tenant_id_and_a_conflict_is_400():
    api = client("admin")
    made = api.post("/jobs", JOB, headers={"X-OJS-Tenant": "acme"})
    assert made.status_code == 201, made.body
    assert made.body["job"]["meta"]["tenant_id"] == "acme"
    assert Job.objects.get(pk=made.body["job"]["id"]).tenant == "acme"
    same = api.post(
        "/jobs", {**JOB, "meta": {"tenant_id": "acme"}}, headers={"X-OJS-Tenant": "acme"}
    )
    assert same.status_code == 201
    other = api.post(
        "/jobs", {**JOB, "meta": {"tenant_id": "beta"}}, headers={"X-OJS-Tenant": "acme"}
    )
    assert_ojs_error(other, 400, "invalid_payload")
    bad = api.post("/jobs", JOB, headers={"X-OJS-Tenant": "no spaces"})
    assert_ojs_error(bad, 400, "invalid_payload")
    bad_meta = api.post("/jobs", {**JOB, "meta": {"tenant_id": "_default"}})
    assert_ojs_error(bad_meta, 400, "invalid_payload")
    batch = api.post("/jobs/batch", {"jobs": [JOB, JOB]}, headers={"X-OJS-Tenant": "b-corp"})
    assert batch.status_code == 201
    assert [j["meta"]["tenant_id"] for j in batch.body["jobs"]] == ["b-corp", "b-corp"]
    assert Job.objects.filter(tenant="b-corp").count() == 2


def test_tenants_required_refuses_jobs_without_one_with_422(settings):
    settings.OJS_TENANT_REQUIRED = True
    api = client("admin")
    assert_ojs_error(api.post("/jobs", JOB), 422, "invalid_payload")
    assert_ojs_error(api.post("/jobs/batch", {"jobs": [JOB]}), 422)
    assert api.post("/jobs", JOB, headers={"X-OJS-Tenant": "acme"}).status_code == 201
    with pytest.raises(TenantRequired):
        django_ojs.enqueue_many([{"type": "t.run"}, {"type": "t.run"}])
    with django_ojs.tenant("acme"):
        assert django_ojs.enqueue("t.run", []).tenant == "acme"
    assert not Job.objects.filter(tenant="").exists()


def test_a_fetch_with_the_header_claims_only_that_tenants_jobs():
    api = client("admin")
    for tenant in ("alpha", "beta", "alpha"):
        api.post("/jobs", JOB, headers={"X-OJS-Tenant": tenant})
    got = api.post(
        "/workers/fetch", {"queues": ["tq"], "count": 10}, headers={"X-OJS-Tenant": "beta"}
    )
    assert [j["meta"]["tenant_id"] for j in got.body["jobs"]] == ["beta"]
    rest = api.post("/workers/fetch", {"queues": ["tq"], "count": 10})
    assert sorted(j["meta"]["tenant_id"] for j in rest.body["jobs"]) == ["alpha", "alpha"]


def test_another_tenants_job_is_not_found_for_info_and_cancel():
    api = client("admin")
    job = api.post("/jobs", JOB, headers={"X-OJS-Tenant": "tenant-a"}).body["job"]
    as_b = {"X-OJS-Tenant": "tenant-b"}
    assert_ojs_error(api.get(f"/jobs/{job['id']}", headers=as_b), 404, "not_found")
    assert_ojs_error(api.delete(f"/jobs/{job['id']}", headers=as_b), 404, "not_found")
    assert_ojs_error(api.get(f"/admin/jobs/{job['id']}", headers=as_b), 404)
    mine = api.get(f"/jobs/{job['id']}", headers={"X-OJS-Tenant": "tenant-a"})
    assert mine.body["job"]["state"] == "available"
    listed = api.get("/admin/jobs", headers=as_b)
    assert listed.body["items"] == []
    assert api.delete(f"/jobs/{job['id']}").status_code == 200  # no tenant: every job


def test_a_producer_key_of_one_tenant_enqueues_for_it_and_no_other():
    producer = keyed("producer", "acme")
    made = producer.post("/jobs", JOB)
    assert made.status_code == 201 and made.body["job"]["meta"]["tenant_id"] == "acme"
    assert_ojs_error(producer.post("/jobs", {**JOB, "meta": {"tenant_id": "beta"}}), 403)
    assert_ojs_error(producer.post("/jobs", JOB, headers={"X-OJS-Tenant": "beta"}), 403)
    assert_ojs_error(
        producer.post("/jobs/batch", {"jobs": [{**JOB, "meta": {"tenant_id": "beta"}}]}), 403
    )
    two = keyed("producer", "acme", "beta")
    assert_ojs_error(two.post("/jobs", JOB), 403, "permission_denied")  # whose? say it
    assert two.post("/jobs", JOB, headers={"X-OJS-Tenant": "beta"}).status_code == 201
    assert sorted(Job.objects.values_list("tenant", flat=True)) == ["acme", "beta"]


def test_operator_and_worker_keys_of_a_tenant_see_and_take_only_its_jobs():
    theirs = django_ojs.enqueue("t.run", [], queue="tq", meta={"tenant_id": "beta"})
    untenanted = django_ojs.enqueue("t.run", [], queue="tq")
    ours = django_ojs.enqueue("t.run", [], queue="tq", meta={"tenant_id": "acme"})
    operator = keyed("operator", "acme")
    assert operator.get(f"/jobs/{ours.id}").status_code == 200
    for other in (theirs, untenanted):
        assert_ojs_error(operator.get(f"/jobs/{other.id}"), 404)
        assert_ojs_error(operator.delete(f"/jobs/{other.id}"), 404)
    assert Job.objects.get(pk=theirs.id).state == "available"
    worker = keyed("worker", "acme")
    got = worker.post("/workers/fetch", {"queues": ["tq"], "count": 10, "worker_id": "w-a"})
    assert [j["id"] for j in got.body["jobs"]] == [str(ours.id)]
    acked = worker.post("/workers/ack", {"job_id": str(theirs.id), "result": None})
    assert_ojs_error(acked, 404)
    assert_ojs_error(
        worker.post("/workers/fetch", {"queues": ["tq"]}, headers={"X-OJS-Tenant": "beta"}), 403
    )


def test_a_workflows_jobs_share_one_tenant():
    first = lifecycle.job_spec("t.step", [1], meta={"tenant_id": "acme"})
    second = lifecycle.job_spec("t.step", [2])
    wf = lifecycle.create_workflow("chain", [first, second])
    assert set(Job.objects.filter(workflow=wf).values_list("tenant", flat=True)) == {"acme"}
    other = lifecycle.job_spec("t.step", [3], meta={"tenant_id": "beta"})
    with pytest.raises(ValidationError, match="one tenant"):
        lifecycle.create_workflow("group", [first, other])
    with django_ojs.tenant("gamma"):
        wf = lifecycle.create_workflow("group", [second, second])
    assert set(Job.objects.filter(workflow=wf).values_list("tenant", flat=True)) == {"gamma"}
    api = client("admin")
    body = {"type": "group", "jobs": [{"type": "t.step", "args": []}]}
    made = api.post("/workflows", body, headers={"X-OJS-Tenant": "delta"})
    assert made.status_code == 201, made.body
    assert Job.objects.filter(tenant="delta").count() == 1


def test_cron_jobs_carry_their_tenant():
    lifecycle.register_cron(
        "per-tenant", "@hourly", "t.report", [], options={"meta": {"tenant_id": "acme"}}
    )
    assert lifecycle.run_cron_now("per-tenant").tenant == "acme"
    api = client("admin")
    made = api.post(
        "/cron",
        {"name": "hdr", "cron": "@daily", "type": "t.report", "args": []},
        headers={"X-OJS-Tenant": "beta"},
    )
    assert made.status_code == 201, made.body
    assert lifecycle.run_cron_now("hdr").tenant == "beta"


def test_the_tasks_backend_names_the_tenant_of_its_jobs():
    from tests.taskapp import tasks

    fixed = OJSBackend("fixed", {"OPTIONS": {"TENANT": "acme"}, "QUEUES": []})
    result = fixed.enqueue(tasks.add, [1], {})
    assert Job.objects.get(pk=result.id).tenant == "acme"
    called = OJSBackend(
        "called",
        {"OPTIONS": {"TENANT_FUNCTION": "tests.integration.test_tenants.tenant_now"}, "QUEUES": []},
    )
    assert Job.objects.get(pk=called.enqueue(tasks.add, [1], {}).id).tenant == "from-function"
    with django_ojs.tenant("ctx"):
        plain = tasks.add.enqueue(1)
    assert Job.objects.get(pk=plain.id).tenant == "ctx"


def tenant_now() -> str:
    return "from-function"


def test_the_current_tenant_follows_a_handler_into_the_jobs_it_enqueues():
    from django_ojs.context import JobContext
    from django_ojs.registry import Handler
    from django_ojs.worker import execution

    def enqueue_more() -> str:
        return str(django_ojs.enqueue("t.child", []).id)

    parent = django_ojs.enqueue("t.parent", [], meta={"tenant_id": "acme"})
    ctx = JobContext(parent.to_wire(), attempt=1, worker_id="w", summary={"meta": parent.meta})
    outcome = execution.run(Handler("t.parent", enqueue_more, None, None, False), [], ctx)
    assert outcome.ok, outcome.error
    assert Job.objects.get(pk=outcome.result).tenant == "acme"
    assert tenancy.current() is None
    explicit = None
    with django_ojs.tenant("acme"):
        explicit = django_ojs.enqueue("t.run", [], meta={"tenant_id": "beta"})
    assert explicit.tenant == "beta"  # a job's own tenant wins


def test_admin_api_tenants_configure_list_stats_jobs_and_forget():
    api = client("admin")
    for tenant in ("acme", "acme", "beta"):
        api.post("/jobs", JOB, headers={"X-OJS-Tenant": tenant})
    put = api.request("PUT", "/admin/tenants/acme", {"fairness_weight": 5})
    assert put.status_code == 201 and put.body["fairness_weight"] == 5
    assert api.request("PUT", "/admin/tenants/acme", {"weight": 2}).status_code == 200
    assert_ojs_error(api.request("PUT", "/admin/tenants/acme", {"fairness_weight": 0}), 400)
    assert_ojs_error(api.request("PUT", "/admin/tenants/acme", {"fairness_weight": "x"}), 400)
    listed = api.get("/admin/tenants").body["items"]
    assert [(t["tenant_id"], t["fairness_weight"], t["total_jobs"]) for t in listed] == [
        ("acme", 2.0, 2),
        ("beta", 1.0, 1),
    ]
    stats = api.get("/admin/tenants/acme/stats").body
    assert stats["tenant_id"] == "acme" and stats["total_jobs"] == 2
    assert stats["jobs"]["available"] == 2 and stats["fairness"] == {"weight": 2.0}
    jobs = api.get("/admin/tenants/beta/jobs").body["items"]
    assert [j["tenant_id"] for j in jobs] == ["beta"]
    assert api.delete("/admin/tenants/acme").body == {"tenant_id": "acme", "deleted": True}
    assert not Tenant.objects.exists()
    assert_ojs_error(api.get("/admin/tenants/bad tenant/stats"), 400)
    limited = keyed("admin", "beta")
    assert [t["tenant_id"] for t in limited.get("/admin/tenants").body["items"]] == ["beta"]
    assert_ojs_error(limited.get("/admin/tenants/acme/stats"), 403)


def test_the_django_admin_shows_filters_and_configures_tenants():
    User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.login(username="root", password="pw")
    django_ojs.enqueue("t.run", [], meta={"tenant_id": "acme"})
    django_ojs.enqueue("t.run", [], meta={"tenant_id": "beta"})
    page = browser.get("/admin/ojs/job/", {"tenant": "acme"})
    assert page.status_code == 200
    assert [j.tenant for j in page.context["cl"].result_list] == ["acme"]
    found = browser.get("/admin/ojs/job/", {"q": "tenant:beta"})
    assert [j.tenant for j in found.context["cl"].result_list] == ["beta"]
    form = {"weight": "3", "priority_boost": "0", "quota": "hard", "max_concurrency": "4"}
    added = browser.post("/admin/ojs/tenant/add/", {"tenant_id": "acme", **form})
    assert added.status_code == 302, added.content[:500]
    assert Tenant.objects.get(pk="acme").weight == 3.0
    assert lifecycle.tenant_limits()["acme"].max_concurrency == 4
    form.update(
        {"max_concurrency": "", "enqueue_rate_limit": "10", "enqueue_rate_period_ms": "60000"}
    )
    changed = browser.post("/admin/ojs/tenant/acme/change/", form)
    assert changed.status_code == 302, changed.content[:500]
    assert lifecycle.limits_wire("acme")["max_enqueue_rate"] == {"limit": 10, "period": "PT60S"}
    assert lifecycle.limits_wire("acme")["max_concurrency"] is None
    refused = browser.post("/admin/ojs/tenant/add/", {"tenant_id": "bad id", **form})
    assert refused.status_code == 200 and not Tenant.objects.filter(pk="bad id").exists()


def test_a_tenant_limited_key_may_not_read_what_spans_every_tenant():
    operator = keyed("operator", "acme")
    assert_ojs_error(operator.get("/events"), 403, "permission_denied")
    admin = keyed("admin", "acme")
    assert_ojs_error(admin.get("/admin/stats"), 403, "permission_denied")
    assert_ojs_error(admin.get("/admin/workers"), 403, "permission_denied")
    assert client("operator").get("/events").status_code == 200


def test_queue_stats_count_only_the_callers_tenants():
    api = client("admin")
    for tenant, n in (("acme", 2), ("beta", 3)):
        for _ in range(n):
            assert api.post("/jobs", JOB, headers={"X-OJS-Tenant": tenant}).status_code == 201
    django_ojs.enqueue("t.run", [], queue="tq")  # no tenant
    everyone = api.get("/queues/tq/stats").body
    assert everyone["stats"]["available"] == 6
    acme = api.get("/queues/tq/stats", headers={"X-OJS-Tenant": "acme"}).body
    assert acme["stats"]["available"] == 2 and acme["stats"]["total"] == 2
    limited = keyed("operator", "beta").get("/queues/tq/stats").body
    assert limited["stats"]["available"] == 3


def test_queue_details_count_only_the_callers_tenants():
    api = client("admin")
    for tenant, n in (("acme", 2), ("beta", 3)):
        for _ in range(n):
            assert api.post("/jobs", JOB, headers={"X-OJS-Tenant": tenant}).status_code == 201
    django_ojs.enqueue("t.run", [], queue="tq")  # no tenant
    assert api.get("/queues/tq").body["stats"]["available"] == 6
    acme = api.get("/queues/tq", headers={"X-OJS-Tenant": "acme"}).body
    assert acme["queue"]["name"] == "tq" and acme["name"] == "tq"
    assert acme["stats"]["available"] == 2 and acme["stats"]["total"] == 2
    assert (
        acme["stats"] == api.get("/queues/tq/stats", headers={"X-OJS-Tenant": "acme"}).body["stats"]
    )
    assert keyed("operator", "beta").get("/queues/tq").body["stats"]["available"] == 3
    # Unknown means what it means for /stats: a tenant sees a queue other tenants use.
    assert keyed("operator", "gamma").get("/queues/tq").body["stats"]["total"] == 0
