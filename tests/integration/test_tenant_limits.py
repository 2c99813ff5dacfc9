"""Per-tenant limits (OJS multi-tenancy §8, §9.3, §10.1-§10.2): enqueue rejection with 429
``tenant_limit_exceeded``, soft quotas, the priority boost, ``max_concurrency`` on claims,
and the admin API's ``/limits``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import apikeys, lifecycle
from django_ojs.exceptions import TenantLimitExceeded
from django_ojs.models import AuditEntry, Event, Job, Tenant
from tests.integration.api_support import OJSClient, assert_ojs_error, client

pytestmark = pytest.mark.django_db


def push(tenant: str, n: int = 1, **options):
    return django_ojs.enqueue_many(
        [{"type": "t.run", "args": [i], "meta": {"tenant_id": tenant}, **options} for i in range(n)]
    )


def test_an_enqueue_past_max_queue_depth_is_refused_and_reported():
    lifecycle.set_limits("acme", {"max_queue_depth": 3})
    push("acme", 2)
    with pytest.raises(TenantLimitExceeded) as caught:
        push("acme", 2)  # all or nothing: 2 + 2 > 3
    assert (caught.value.limit, caught.value.current, caught.value.maximum) == (
        "max_queue_depth",
        2,
        3,
    )
    assert Job.objects.filter(tenant="acme").count() == 2
    django_ojs.enqueue("t.run", [], meta={"tenant_id": "acme"})  # the third fits
    with pytest.raises(TenantLimitExceeded):
        django_ojs.enqueue("t.run", [], meta={"tenant_id": "acme"})
    push("beta", 5)  # another tenant is not limited by acme's limits
    push("", 0)
    django_ojs.enqueue("t.run", [])
    event = Event.objects.filter(type="tenant.limit_exceeded").latest("seq")
    assert event.subject == "acme"
    assert event.data["limit"] == "max_queue_depth" and event.data["action"] == "rejected"
    assert Event.objects.filter(type="tenant.limit_exceeded").count() == 2
    # Jobs that leave the waiting states make room again.
    job = lifecycle.fetch(["default"], worker_id="w1", tenants=["acme"])[0]
    assert job.tenant == "acme"
    django_ojs.enqueue("t.run", [], meta={"tenant_id": "acme"})


def test_max_scheduled_counts_only_jobs_for_later():
    lifecycle.set_limits("acme", {"max_scheduled": 1})
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    push("acme", 1, scheduled_at=later)
    push("acme", 3)  # to run now: not counted
    with pytest.raises(TenantLimitExceeded) as caught:
        push("acme", 1, scheduled_at=later)
    assert caught.value.limit == "max_scheduled"


def test_the_enqueue_rate_refuses_past_its_window_and_lets_the_next_window_in():
    lifecycle.set_limits("acme", {"max_enqueue_rate": {"limit": 3, "period": "PT1H"}})
    push("acme", 3)
    with pytest.raises(TenantLimitExceeded) as caught:
        push("acme", 1)
    assert caught.value.limit == "max_enqueue_rate" and caught.value.retry_after > 3000
    # The window began an hour ago: it is over, and the next one starts with this push.
    row = Tenant.objects.get(pk="acme")
    row.enqueue_window_start -= timedelta(hours=1)
    row.save()
    push("acme", 3)
    assert Tenant.objects.get(pk="acme").enqueue_window_count == 3


def test_a_soft_quota_lets_the_push_through_and_reports_it():
    lifecycle.set_limits("acme", {"max_queue_depth": 1, "quota": "soft"})
    push("acme", 3)
    assert Job.objects.filter(tenant="acme").count() == 3
    event = Event.objects.get(type="tenant.limit_exceeded")
    assert event.data["action"] == "allowed" and event.data["quota"] == "soft"


def test_a_priority_boost_raises_the_priority_of_the_tenants_jobs():
    lifecycle.set_limits("gold", {"priority_boost": 10})
    boosted = django_ojs.enqueue("t.run", [], meta={"tenant_id": "gold"}, priority=3)
    plain = django_ojs.enqueue("t.run", [], meta={"tenant_id": "lead"}, priority=3)
    assert Job.objects.get(pk=boosted.id).priority == 13
    assert Job.objects.get(pk=plain.id).priority == 3
    assert lifecycle.fetch(["default"], worker_id="w")[0].id == boosted.id


def test_an_enqueue_inside_a_transaction_rolls_back_with_it_and_the_limit_holds():
    from django.db import transaction

    lifecycle.set_limits("acme", {"max_queue_depth": 2})
    with pytest.raises(RuntimeError), transaction.atomic():
        push("acme", 2)
        raise RuntimeError
    push("acme", 2)
    with pytest.raises(TenantLimitExceeded):
        push("acme", 1)


def test_max_concurrency_caps_a_tenants_active_jobs_across_fetches_and_queues():
    lifecycle.set_limits("noisy", {"max_concurrency": 2})
    push("noisy", 6)
    django_ojs.enqueue_many(
        [
            {"type": "t.run", "meta": {"tenant_id": "noisy"}, "queue": "other"},
            {"type": "t.run", "meta": {"tenant_id": "quiet"}, "queue": "other"},
        ]
    )
    push("quiet", 3)
    django_ojs.enqueue("t.run", [])  # a job without a tenant
    first = lifecycle.fetch(["default", "other"], count=10, worker_id="w1")
    tenants = sorted(job.tenant for job in first)
    assert tenants == ["", "noisy", "noisy", "quiet", "quiet", "quiet", "quiet"]
    assert lifecycle.fetch(["default", "other"], count=10, worker_id="w2") == []
    done = next(job for job in first if job.tenant == "noisy")
    lifecycle.ack(done.id, worker_id="w1")
    again = lifecycle.fetch(["default", "other"], count=10, worker_id="w2")
    assert [job.tenant for job in again] == ["noisy"]
    assert Job.objects.filter(tenant="noisy", state="active").count() == 2
    # Lifting the cap hands out the rest.
    lifecycle.set_limits("noisy", {"max_concurrency": None})
    assert len(lifecycle.fetch(["default", "other"], count=10, worker_id="w3")) == 4


def test_max_concurrency_holds_for_rate_limited_jobs_and_a_tenant_scoped_fetch():
    lifecycle.set_limits("noisy", {"max_concurrency": 1})
    django_ojs.enqueue_many(
        [
            {
                "type": "t.run",
                "meta": {"tenant_id": "noisy"},
                "rate_limit": {"key": "api", "concurrency": 5},
            }
            for _ in range(3)
        ]
    )
    push("noisy", 2)
    got = lifecycle.fetch(["default"], count=10, worker_id="w1", tenants=["noisy"])
    assert len(got) == 1
    assert lifecycle.fetch(["default"], count=10, worker_id="w2") == []


def test_a_capped_tenants_backlog_does_not_hold_back_the_others():
    lifecycle.set_limits("noisy", {"max_concurrency": 1})
    push("noisy", 50)
    push("quiet", 2)
    first = lifecycle.fetch(["default"], count=1, worker_id="w1")
    assert [j.tenant for j in first] == ["noisy"]
    taken = lifecycle.fetch(["default"], count=5, worker_id="w2")
    assert sorted(j.tenant for j in taken) == ["quiet", "quiet"]


def keyed(scope: str, *tenants: str) -> OJSClient:
    return OJSClient(apikeys.create(f"{scope}-{'-'.join(tenants)}", scope, tenants=tenants)[1])


def test_the_http_api_answers_429_with_the_limit_and_retry_after():
    api = client("admin")
    job = {"type": "t.run", "args": []}
    put = api.request(
        "PUT",
        "/admin/tenants/acme/limits",
        {"max_queue_depth": 1, "reason": "incident 42: downstream outage"},
    )
    assert put.status_code == 201, put.body
    assert put.body["max_queue_depth"] == 1 and put.body["max_concurrency"] is None
    assert api.post("/jobs", job, headers={"X-OJS-Tenant": "acme"}).status_code == 201
    refused = api.post("/jobs", job, headers={"X-OJS-Tenant": "acme"})
    body = assert_ojs_error(refused, 429, "tenant_limit_exceeded")
    assert refused["Retry-After"] == "30"
    assert body["tenant_id"] == "acme" and body["limit"] == "max_queue_depth"
    assert (body["current"], body["maximum"]) == (1, 1)
    assert body["details"]["maximum"] == 1
    batch = api.post("/jobs/batch", {"jobs": [job]}, headers={"X-OJS-Tenant": "acme"})
    assert_ojs_error(batch, 429, "tenant_limit_exceeded")
    entry = AuditEntry.objects.filter(action="tenant.limits").latest("id")
    assert entry.detail["reason"] == "incident 42: downstream outage"


def test_the_admin_api_sets_and_shows_limits_and_refuses_bad_ones():
    api = client("admin")
    put = api.request(
        "PUT",
        "/admin/tenants/acme",
        {
            "tenant_id": "acme",
            "limits": {
                "max_concurrency": 20,
                "max_enqueue_rate": {"limit": 1000, "period": "PT1M"},
            },
            "fairness_weight": 10,
            "priority_boost": 2,
        },
    )
    assert put.status_code == 201, put.body
    assert put.body["limits"]["max_concurrency"] == 20
    assert put.body["limits"]["max_enqueue_rate"] == {"limit": 1000, "period": "PT60S"}
    assert put.body["fairness_weight"] == 10 and put.body["priority_boost"] == 2
    assert api.get("/admin/tenants/acme/limits").body["max_concurrency"] == 20
    lowered = api.request("PUT", "/admin/tenants/acme/limits", {"max_concurrency": 5})
    assert lowered.status_code == 200 and lowered.body["max_concurrency"] == 5
    assert lowered.body["max_enqueue_rate"] == {"limit": 1000, "period": "PT60S"}
    detail = api.get("/admin/tenants/acme").body
    assert detail["config"]["limits"]["max_concurrency"] == 5
    stats = api.get("/admin/tenants/acme/stats").body
    assert stats["limits"]["max_concurrency"] == {"limit": 5, "current": 0}
    for bad in ({"max_concurrency": -1}, {"max_workers": 1}, {"reason": 5}):
        assert_ojs_error(api.request("PUT", "/admin/tenants/acme/limits", bad), 400)
    assert_ojs_error(api.request("PUT", "/admin/tenants/acme", {"limits": 3}), 400)
    assert_ojs_error(api.request("PUT", "/admin/tenants/acme", {"tenant_id": "beta"}), 400)
    assert Event.objects.filter(type="tenant.created", subject="acme").count() == 1
    limited = keyed("admin", "beta")
    assert_ojs_error(
        limited.request("PUT", "/admin/tenants/acme/limits", {"max_concurrency": 1}), 403
    )
    assert (
        limited.request("PUT", "/admin/tenants/beta/limits", {"max_concurrency": 1}).status_code
        == 201
    )


# -- Noisy neighbours (§9) -------------------------------------------------------------------


def test_off_by_default_no_tenant_is_throttled():
    push("big", 30)
    push("small", 1)
    assert lifecycle.detect_noisy_neighbours(force=True) == {}
    assert not Event.objects.filter(type="tenant.throttled").exists()


def test_a_deep_tenant_is_throttled_its_next_jobs_take_turns_further_apart(settings):
    settings.OJS_TENANT_THROTTLING = {"min_depth": 20, "weight_factor": 0.25}
    push("big", 40)
    push("a", 2)
    push("b", 2)
    assert lifecycle.detect_noisy_neighbours(force=True) == {"big": "queue_depth_ratio_exceeded"}
    event = Event.objects.get(type="tenant.throttled")
    assert event.subject == "big" and event.data["action"] == "weight_reduced"
    assert (event.data["original_weight"], event.data["effective_weight"]) == (1.0, 0.25)
    throttle = lifecycle.tenant_throttle("big")
    assert throttle is not None and throttle["effective_weight"] == 0.25
    # Its next jobs' turns are four apart; another tenant's one apart.
    for job in lifecycle.fetch(["default"], count=100, worker_id="drain"):
        lifecycle.ack(job.id, worker_id="drain")
    fresh_big = [j.id for j in push("big", 3)]
    fresh_c = [j.id for j in push("c", 3)]
    turns = dict(Job.objects.filter(id__in=fresh_big + fresh_c).values_list("id", "vtime"))
    big = sorted(turns[i] for i in fresh_big)
    c = sorted(turns[i] for i in fresh_c)
    assert big[1] - big[0] == pytest.approx(4.0) and c[1] - c[0] == pytest.approx(1.0)
    # Still noisy at the next detection: renewed, without another event.
    push("big", 40)
    assert lifecycle.detect_noisy_neighbours(force=True) == {"big": "queue_depth_ratio_exceeded"}
    assert Event.objects.filter(type="tenant.throttled").count() == 1


def test_a_tenant_running_most_jobs_is_held_to_its_share_until_the_throttle_ends(settings):
    settings.OJS_TENANT_THROTTLING = {"min_active": 4, "duration": 600}
    push("big", 10)
    first = lifecycle.fetch(["default"], count=6, worker_id="w1")
    assert {j.tenant for j in first} == {"big"}
    push("small", 3)
    assert lifecycle.detect_noisy_neighbours(force=True) == {"big": "active_job_ratio_exceeded"}
    assert lifecycle.tenant_throttle("big")["effective_concurrency"] == 3
    # 6 of big's jobs run: no more of them until fewer than 3 do; small's go.
    taken = lifecycle.fetch(["default"], count=10, worker_id="w2")
    assert sorted(j.tenant for j in taken) == ["small"] * 3
    for job in first[:4]:
        lifecycle.ack(job.id, worker_id="w1")
    assert [j.tenant for j in lifecycle.fetch(["default"], count=10, worker_id="w3")] == ["big"]
    # The throttle ends: the next pass lifts it and says so.
    Tenant.objects.filter(pk="big").update(throttled_until=timezone.now() - timedelta(seconds=1))
    settings.OJS_TENANT_THROTTLING = None
    lifecycle.forget_tenant_limits()
    assert lifecycle.detect_noisy_neighbours() == {}
    released = Event.objects.get(type="tenant.throttle_released")
    assert released.subject == "big" and released.data["reason"] == "expired"
    assert lifecycle.tenant_throttle("big") is None
    assert len(lifecycle.fetch(["default"], count=10, worker_id="w4")) == 3


def test_an_operator_throttles_and_releases_a_tenant_over_http(settings):
    settings.OJS_TENANT_THROTTLING = {"min_active": 1}
    api = client("admin")
    put = api.request(
        "PUT",
        "/admin/tenants/acme/throttle",
        {"concurrency": 1, "duration": "PT10M", "reason": "incident 7"},
    )
    assert put.status_code == 200, put.body
    assert put.body["throttle"]["effective_concurrency"] == 1
    assert put.body["throttle"]["reason"] == "manual: incident 7"
    push("acme", 3)
    assert len(lifecycle.fetch(["default"], count=10, worker_id="w")) == 1
    # The detection leaves an operator's throttle as it is.
    push("other", 1)
    lifecycle.detect_noisy_neighbours(force=True)
    assert lifecycle.tenant_throttle("acme")["effective_concurrency"] == 1
    assert api.get("/admin/tenants/acme").body["throttle"]["effective_concurrency"] == 1
    for bad in ({}, {"weight": 0}, {"concurrency": 0}, {"duration": "soon", "weight": 1}, {"x": 1}):
        assert_ojs_error(api.request("PUT", "/admin/tenants/acme/throttle", bad), 400)
    assert api.delete("/admin/tenants/acme/throttle").body == {
        "tenant_id": "acme",
        "released": True,
    }
    assert api.delete("/admin/tenants/acme/throttle").body["released"] is False
    assert api.get("/admin/tenants/acme/throttle").body["throttle"] is None
    assert AuditEntry.objects.filter(action="tenant.release_throttle").count() == 1


def test_a_malformed_throttling_setting_fails_the_checks(settings):
    from django_ojs.checks import check_settings

    settings.OJS_TENANT_THROTTLING = {"depth": 3}
    assert [e.id for e in check_settings()] == ["ojs.E018"]


def test_the_django_admin_shows_and_lifts_a_throttle():
    from django.contrib.auth.models import User
    from django.test import Client

    User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.login(username="root", password="pw")
    lifecycle.throttle_tenant("acme", concurrency=2, seconds=600, reason="manual")
    page = browser.get("/admin/ojs/tenant/acme/change/")
    assert page.status_code == 200 and b"throttled_until" in page.content
    done = browser.post(
        "/admin/ojs/tenant/",
        {"action": "release_throttles", "_selected_action": ["acme"]},
        follow=True,
    )
    assert done.status_code == 200 and b"Lifted 1 throttle" in done.content
    assert lifecycle.tenant_throttle("acme") is None


def test_tenants_configured_in_settings_are_stored_and_keep_what_they_do_not_name(settings):
    settings.OJS_TENANTS = {
        "acme": {"fairness_weight": 10, "limits": {"max_concurrency": 20}},
        "gold": {"priority_boost": 5},
    }
    assert lifecycle.sync_tenants() == ["acme", "gold"]
    assert lifecycle.weight_of("acme") == 10.0
    assert lifecycle.limits_wire("acme")["max_concurrency"] == 20
    assert lifecycle.limits_wire("gold")["priority_boost"] == 5
    # An operator's change to a limit the settings do not name stays; nothing to do.
    lifecycle.set_limits("acme", {"max_queue_depth": 100})
    assert lifecycle.sync_tenants() == []
    assert lifecycle.limits_wire("acme")["max_queue_depth"] == 100
    # A changed setting is applied when the reaper next starts.
    settings.OJS_TENANTS["acme"]["limits"] = {"max_concurrency": 5}
    assert lifecycle.sync_tenants() == ["acme"]
    assert lifecycle.limits_wire("acme")["max_concurrency"] == 5


@pytest.mark.django_db(transaction=True)
def test_the_reaper_stores_the_tenants_of_the_settings_when_it_starts(settings):
    import threading

    from django.db import connections

    from django_ojs import reaper

    settings.OJS_TENANTS = {"acme": {"limits": {"max_queue_depth": 7}}}
    stop = threading.Event()

    def run() -> None:
        try:
            reaper.run(interval=0.05, stop=stop)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        for _ in range(2400):  # until it has started (never a race: it stores first)
            if Tenant.objects.filter(pk="acme", max_queue_depth=7).exists():
                break
            stop.wait(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert lifecycle.limits_wire("acme")["max_queue_depth"] == 7


@pytest.mark.parametrize(
    "value",
    [
        ["acme"],
        {"bad id": {}},
        {"acme": 3},
        {"acme": {"weight": 0}},
        {"acme": {"limits": {"max_concurrency": -1}}},
        {"acme": {"limit": {}}},
    ],
)
def test_malformed_tenants_in_settings_fail_the_checks(settings, value):
    from django_ojs.checks import check_settings

    settings.OJS_TENANTS = value
    assert [e.id for e in check_settings()] == ["ojs.E018"]
