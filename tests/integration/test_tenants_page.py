"""The tenants page (issue 38): every tenant's jobs by state, running jobs, the job that
waits longest, weight and limits, a page at a time, in the Django admin and in
``GET /admin/tenants``; and the oldest waiting job in a tenant's detail and statistics."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import django_ojs
from django_ojs import apikeys, lifecycle
from django_ojs.admin import tenants as tenants_admin
from django_ojs.models import Job
from tests.factories import JobFactory
from tests.integration.api_support import OJSClient, assert_ojs_error, client

pytestmark = pytest.mark.django_db


def keyed(scope: str, *tenants: str) -> OJSClient:
    return OJSClient(apikeys.create(f"{scope}-{'-'.join(tenants)}", scope, tenants=tenants)[1])


def enqueue(tenant: str, queue: str = "default", **options) -> Job:
    return django_ojs.enqueue("t.run", [], queue=queue, meta={"tenant_id": tenant}, **options)


def backdate(job: Job, seconds: float) -> None:
    """As if the job had been created ``seconds`` ago (the test's own row, not a state)."""
    when = timezone.now() - timedelta(seconds=seconds)
    Job.objects.filter(pk=job.pk).update(created_at=when, enqueued_at=when)


@pytest.fixture
def tenants_with_jobs():
    """acme: 2 waiting in default, 1 in mail (oldest), 1 running, 1 scheduled, 1 done;
    beta: 1 waiting; gamma: configured, no jobs; no-tenant jobs are nobody's."""
    first = enqueue("acme")
    enqueue("acme")
    oldest = enqueue("acme", queue="mail")
    backdate(first, 60)
    backdate(oldest, 600)
    running = enqueue("acme", queue="work")
    (claimed,) = lifecycle.fetch(["work"], worker_id="w1")
    assert claimed.id == running.id
    enqueue("acme", scheduled_at=timedelta(hours=1))
    JobFactory(tenant="acme", completed=True)
    enqueue("beta")
    django_ojs.enqueue("t.run", [])  # no tenant
    lifecycle.set_tenant("gamma", weight=3)
    return {"oldest": oldest, "running": running}


def test_summaries_count_by_state_and_find_the_oldest_waiting_job(tenants_with_jobs):
    acme, beta, gamma = lifecycle.tenant_summaries(["acme", "beta", "gamma"])
    assert acme.jobs["available"] == 3 and acme.jobs["active"] == 1
    assert acme.jobs["scheduled"] == 1 and acme.jobs["completed"] == 1
    assert acme.total == 6 and acme.estimated == []
    assert acme.oldest_available.job_id == str(tenants_with_jobs["oldest"].id)
    assert acme.oldest_available.queue == "mail"
    assert 590 <= acme.oldest_available.age(timezone.now()) < 3600
    assert beta.total == 1 and beta.oldest_available is not None and not beta.configured
    assert gamma.total == 0 and gamma.oldest_available is None
    assert gamma.configured and gamma.weight == 3.0
    assert acme.limits == {} == gamma.limits  # filled when Tenant gets limit fields


def test_a_page_lists_tenants_with_jobs_and_configured_ones_by_keyset(tenants_with_jobs):
    page, cursor = lifecycle.tenant_page(limit=2)
    assert [s.tenant_id for s in page] == ["acme", "beta"] and cursor == "beta"
    page, cursor = lifecycle.tenant_page(after=cursor, limit=2)
    assert [s.tenant_id for s in page] == ["gamma"] and cursor is None
    scoped, cursor = lifecycle.tenant_page(tenants=["beta", "zeta", "gamma"], limit=1)
    assert [s.tenant_id for s in scoped] == ["beta"] and cursor == "beta"
    scoped, cursor = lifecycle.tenant_page(after="beta", tenants=["beta", "zeta", "gamma"])
    # zeta has neither jobs nor a configuration: not a tenant (yet).
    assert [s.tenant_id for s in scoped] == ["gamma"] and cursor is None


def test_counts_past_the_exact_bound_are_estimates_on_postgresql():
    for _ in range(4):
        enqueue("big")
    (big,) = lifecycle.tenant_summaries(["big"], exact_up_to=2)
    if connection.vendor == "postgresql":
        assert big.estimated == ["available"] and big.jobs["available"] >= 3
    else:  # the ORM driver counts exactly
        assert big.estimated == [] and big.jobs["available"] == 4


def test_the_oldest_waiting_job_is_the_head_of_its_queue_in_claim_order():
    low = enqueue("acme", priority=0)
    backdate(low, 300)
    high = enqueue("acme", priority=5)
    # The high-priority job runs first: it is the tenant's next job in the queue.
    assert lifecycle.oldest_available("acme").job_id == str(high.id)
    assert lifecycle.oldest_available("nobody") is None


def test_the_api_lists_summaries_and_scopes_them_to_the_keys_tenants(tenants_with_jobs):
    api = client("admin")
    body = api.get("/admin/tenants?limit=2").body
    acme, beta = body["items"]
    assert beta["tenant_id"] == "beta" and beta["total_jobs"] == 1
    assert body["pagination"] == {"next_after": "beta"}
    assert acme["tenant_id"] == "acme" and acme["fairness_weight"] == 1.0
    assert acme["jobs"]["available"] == 3 and acme["active"] == 1 and acme["total_jobs"] == 6
    assert acme["oldest_available"]["job_id"] == str(tenants_with_jobs["oldest"].id)
    assert acme["oldest_available"]["queue"] == "mail"
    assert acme["oldest_available_at"] == acme["oldest_available"]["available_since"]
    assert acme["oldest_available_age_seconds"] >= 590
    assert acme["limits"] == {} and acme["configured"] is False and acme["estimated"] == []
    rest = api.get("/admin/tenants?after=beta").body
    assert [t["tenant_id"] for t in rest["items"]] == ["gamma"]
    assert rest["items"][0]["oldest_available"] is None
    assert rest["pagination"]["next_after"] is None
    limited = keyed("admin", "beta", "gamma").get("/admin/tenants").body["items"]
    assert [t["tenant_id"] for t in limited] == ["beta", "gamma"]
    header = api.get("/admin/tenants", headers={"X-OJS-Tenant": "acme"}).body["items"]
    assert [t["tenant_id"] for t in header] == ["acme"]
    assert_ojs_error(api.get("/admin/tenants?after=bad tenant"), 400)


def test_detail_and_stats_say_what_waits_longest(tenants_with_jobs):
    api = client("admin")
    for path in ("/admin/tenants/acme", "/admin/tenants/acme/stats"):
        body = api.get(path).body
        assert body["jobs"]["available"] == 3 and body["jobs"]["active"] == 1
        assert body["jobs"]["scheduled"] == 1 and body["limits"] == {}
        assert body["oldest_available"]["job_id"] == str(tenants_with_jobs["oldest"].id)
        assert body["oldest_available_age_seconds"] >= 590
        assert "completed_24h" not in body["jobs"]  # not served: spec readings
    nothing = api.get("/admin/tenants/gamma/stats").body
    assert nothing["oldest_available"] is None and nothing["oldest_available_at"] is None
    assert_ojs_error(keyed("admin", "beta").get("/admin/tenants/acme/stats"), 403)


@pytest.fixture
def browser() -> Client:
    User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.login(username="root", password="pw")
    return browser


def test_the_admin_page_lists_every_tenant_with_its_jobs(browser, tenants_with_jobs):
    page = browser.get(reverse("admin:ojs_tenant_changelist"))
    assert page.status_code == 200
    rows = {r["tenant"]: r for r in page.context["rows"]}
    assert list(rows) == ["acme", "beta", "gamma"]
    acme = rows["acme"]
    counts = dict(zip(page.context["columns"], [c for c, _, _ in acme["counts"]], strict=True))
    assert counts["available"] == 3 and counts["running"] == 1 and counts["scheduled"] == 1
    assert acme["total"] == 6 and not acme["configured"]
    job_url = reverse("admin:ojs_job_change", args=[tenants_with_jobs["oldest"].id])
    assert acme["oldest"]["url"] == job_url and acme["oldest"]["queue"] == "mail"
    html = page.content.decode()
    assert (
        job_url in html and "tenant=acme" in html and "tenant=acme&amp;state__exact=active" in html
    )
    assert rows["gamma"]["configured"] and rows["gamma"]["weight"] == 3.0
    assert (
        rows["gamma"]["change_url"] in html
        and rows["acme"]["add_url"].replace("&", "&amp;") in html
    )
    # The links filter the job list by tenant.
    listed = browser.get(acme["jobs_url"])
    assert {j.tenant for j in listed.context["cl"].result_list} == {"acme"}
    # The "configure" link fills in the tenant.
    form = browser.get(acme["add_url"])
    assert form.context["adminform"].form.initial["tenant_id"] == "acme"


def test_the_admin_page_pages_by_keyset(browser, tenants_with_jobs, monkeypatch):
    monkeypatch.setattr(tenants_admin, "PAGE_SIZE", 2)
    first = browser.get(reverse("admin:ojs_tenant_changelist"))
    assert [r["tenant"] for r in first.context["rows"]] == ["acme", "beta"]
    assert first.context["next_url"].endswith("?after=beta")
    second = browser.get(first.context["next_url"])
    assert [r["tenant"] for r in second.context["rows"]] == ["gamma"]
    assert second.context["next_url"] == "" and second.context["first_url"]
    bad = browser.get(reverse("admin:ojs_tenant_changelist"), {"after": "bad tenant"})
    assert bad.status_code == 200 and bad.context["error"]


def test_the_admin_page_needs_the_view_permission(tenants_with_jobs):
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    browser = Client()
    browser.login(username="staff", password="pw")
    assert browser.get(reverse("admin:ojs_tenant_changelist")).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_tenant"))
    page = Client()
    page.login(username="staff", password="pw")
    response = page.get(reverse("admin:ojs_tenant_changelist"))
    assert response.status_code == 200 and not response.context["has_add_permission"]
    assert "configure</a>" not in response.content.decode()


def test_a_tenant_id_with_punctuation_links_to_its_pages(browser):
    lifecycle.set_tenant("acme-corp:eu_3A.1", weight=2)
    enqueue("acme-corp:eu_3A.1")
    (row,) = browser.get(reverse("admin:ojs_tenant_changelist")).context["rows"]
    change = browser.get(row["change_url"])
    assert change.status_code == 200 and change.context["original"].tenant_id == row["tenant"]
    listed = browser.get(row["jobs_url"])
    assert [j.tenant for j in listed.context["cl"].result_list] == ["acme-corp:eu_3A.1"]


def test_limits_show_what_the_tenant_uses_of_them(browser, tenants_with_jobs):
    lifecycle.set_limits(
        "acme",
        {
            "max_concurrency": 20,
            "max_queue_depth": 50,
            "max_enqueue_rate": {"limit": 100, "period": "PT1M"},
        },
    )
    (acme,) = lifecycle.tenant_summaries(["acme"])
    assert acme.limits == {
        "max_concurrency": {"limit": 20, "current": 1},
        "max_queue_depth": {"limit": 50, "current": 4},
        "max_enqueue_rate": {"limit": 100, "period": "PT60S"},
    }
    api = client("admin")
    listed = api.get("/admin/tenants?limit=1").body["items"][0]
    assert listed["limits"] == {**acme.limits, "max_concurrent_jobs": 20}  # + the UI's name
    assert api.get("/admin/tenants/acme/stats").body["limits"] == acme.limits
    page = browser.get(reverse("admin:ojs_tenant_changelist"))
    row = next(r for r in page.context["rows"] if r["tenant"] == "acme")
    assert row["limits"] == "max_concurrency 1/20, max_queue_depth 4/50, max_enqueue_rate 100/PT60S"


def test_the_page_runs_actions_on_configured_tenants(browser, tenants_with_jobs):
    lifecycle.throttle_tenant("gamma", concurrency=2, seconds=600, reason="manual")
    page = browser.get(reverse("admin:ojs_tenant_changelist"))
    assert ("release_throttles", "Lift the selected tenants' throttles") in page.context["actions"]
    html = page.content.decode()
    assert 'value="gamma" class="action-select"' in html
    assert 'value="acme" class="action-select"' not in html  # not configured: nothing to act on
    done = browser.post(
        reverse("admin:ojs_tenant_changelist"),
        {"action": "release_throttles", "index": "0", "_selected_action": ["gamma"]},
        follow=True,
    )
    assert b"Lifted 1 throttle" in done.content and "rows" in done.context
    assert lifecycle.tenant_throttle("gamma") is None


@pytest.mark.postgresql
def test_the_page_turns_jit_off_for_its_statements_only():
    enqueue("acme")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = on")
        (acme,) = lifecycle.tenant_summaries(["acme"])
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "on"
    assert acme.jobs["available"] == 1


def test_the_official_admin_uis_numbered_pages_and_fields():
    for tenant in ("t1", "t2", "t3"):
        django_ojs.enqueue("t.run", [], meta={"tenant_id": tenant})
    lifecycle.set_limits("t2", {"max_concurrency": 4})
    api = client("admin")
    first = api.get("/admin/tenants?page=1&per_page=2").body
    assert first["pagination"] == {"page": 1, "per_page": 2, "total": 3}
    assert [t["id"] for t in first["items"]] == ["t1", "t2"]
    t2 = first["items"][1]
    assert t2["name"] == "t2" and t2["state"] == "active"
    assert t2["limits"]["max_concurrent_jobs"] == 4
    assert t2["limits"]["max_concurrency"] == {"limit": 4, "current": 0}
    assert t2["stats"] == {"queues": 1, "jobs": t2["jobs"], "workers": 0}
    assert t2["stats"]["jobs"]["available"] == 1 and t2["created_at"] is not None
    assert first["items"][0]["created_at"] is None  # no configuration
    lifecycle.fetch(["default"], worker_id="w-1", tenants=["t1"])
    t1 = api.get("/admin/tenants?page=1&per_page=1").body["items"][0]
    assert t1["stats"]["workers"] == 1 and t1["stats"]["queues"] == 0
    second = api.get("/admin/tenants?page=2&per_page=2").body
    assert [t["id"] for t in second["items"]] == ["t3"]
    assert api.get("/admin/tenants?page=9&per_page=2").body["items"] == []
    for bad in ("page=0", "per_page=x", "per_page=501"):
        assert api.get(f"/admin/tenants?{bad}").status_code == 400
