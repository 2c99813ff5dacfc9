"""Rate and concurrency limits at claim time (OJS rate-limiting extension), Python and HTTP."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job
from tests.integration.api_support import assert_ojs_error, client
from tests.threads import run_threads

pytestmark = pytest.mark.django_db


def _push(n, rate_limit, queue="api", type="call.api", **options):
    return django_ojs.enqueue_many(
        [{"type": type, "args": [i], "queue": queue, "rate_limit": rate_limit, **options}
         for i in range(n)]
    )  # fmt: skip


def _fetch(n=10, queue="api", worker="w-1"):
    return lifecycle.fetch([queue], n, worker_id=worker)


def test_concurrency_limit_caps_active_jobs_and_frees_on_ack():
    _push(5, {"key": "stripe", "concurrency": 2})
    first = _fetch()
    assert len(first) == 2 and _fetch() == []
    assert Job.objects.filter(state="available").count() == 3  # on_limit wait: still there
    lifecycle.ack(first[0].id, worker_id="w-1")
    assert len(_fetch()) == 1


def test_jobs_without_limits_are_not_held_up_by_limited_ones():
    _push(3, {"key": "slow-api", "concurrency": 1})
    free = django_ojs.enqueue("call.free", [], queue="api")
    claimed = _fetch()
    assert free.id in {j.id for j in claimed}
    assert sum(1 for j in claimed if j.rate_key == "slow-api") == 1


def test_a_key_is_shared_across_queues_and_types():
    _push(2, {"key": "shared", "concurrency": 1}, queue="a", type="x.one")
    _push(2, {"key": "shared", "concurrency": 1}, queue="b", type="x.two")
    assert len(lifecycle.fetch(["a", "b"], 10, worker_id="w")) == 1


def test_window_rate_limit_counts_recent_starts():
    _push(4, {"key": "mail", "rate": {"limit": 2, "period": "PT1H"}})
    assert len(_fetch()) == 2 and _fetch() == []
    # the starts leave the window
    Job.objects.filter(state="active").update(started_at=timezone.now() - timedelta(hours=2))
    assert len(_fetch()) == 2


def test_max_per_second_is_a_one_second_window():
    (job,) = _push(1, {"max_per_second": 1})
    assert job.rate_key == "queue:api" and job.rate_limit["rate"] == {"limit": 1, "period": "PT1S"}


def test_throttle_allows_one_start_per_spacing():
    _push(3, {"key": "t", "throttle": {"limit": 1, "period": "PT1H"}})
    assert len(_fetch()) == 1 and _fetch() == []


def test_bad_policy_is_refused():
    with pytest.raises(ValidationError):
        django_ojs.enqueue("x", [], rate_limit={"key": "k"})


def test_http_inspection_and_listing():
    _push(3, {"key": "stripe", "concurrency": 2, "rate": {"limit": 10, "period": "PT1M"}})
    _fetch()
    api = client("operator")
    status = api.get("/rate-limits/stripe")
    assert status.status_code == 200, status.body
    body = status.body
    assert body["concurrency"] == {"limit": 2, "active": 2, "available": 0}
    assert body["rate"]["current_count"] == 2 and body["waiting_count"] == 1
    assert body["allowed_now"] == 0
    listed = api.get("/rate-limits").body
    assert [i["key"] for i in listed["items"]] == ["stripe"]
    assert listed["pagination"] == {
        "total": 1, "limit": 50, "offset": 0, "has_more": False, "page": 1, "per_page": 50,
    }  # fmt: skip
    assert_ojs_error(api.get("/rate-limits/unknown"), 404, "not_found")


def test_http_listing__pages_by_page_and_per_page_as_rate_limiting_10_3_names_them():
    for key in ("a-key", "b-key", "c-key"):
        _push(1, {"key": key, "concurrency": 1})
    api = client("operator")
    second = api.get("/rate-limits?page=2&per_page=1").body
    assert len(second["items"]) == 1
    assert {k: second["pagination"][k] for k in ("total", "page", "per_page")} == {
        "total": 3, "page": 2, "per_page": 1,
    }  # fmt: skip
    keys = [api.get(f"/rate-limits?page={n}&per_page=1").body["items"][0]["key"] for n in (1, 2, 3)]
    assert sorted(keys) == ["a-key", "b-key", "c-key"]
    assert api.get("/rate-limits?page=4&per_page=1").body["items"] == []
    # HB §17's own parameters win: limit over per_page, offset over page.
    both = api.get("/rate-limits?page=3&per_page=1&offset=0&limit=2").body["pagination"]
    assert (both["offset"], both["limit"], both["page"], both["per_page"]) == (0, 2, 1, 2)
    assert_ojs_error(api.get("/rate-limits?page=0"), 400, "invalid_request")
    assert_ojs_error(api.get("/rate-limits?per_page=x"), 400, "invalid_request")


def test_http_enqueue_with_a_bad_policy_is_4xx():
    response = client("producer").post(
        "/jobs", {"type": "x", "args": [], "options": {"rate_limit": {"concurrency": "many"}}}
    )
    assert_ojs_error(response, 400)


def _race_fetchers(threads: int) -> int:
    """Fetch and ack from ``threads`` threads until every job completed; the peak active."""
    peaks: list[int] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            peaks.append(Job.objects.filter(state="active").count())
        connections.close_all()

    def worker(index):
        while Job.objects.exclude(state="completed").exists():
            for job in lifecycle.fetch(["api"], 2, worker_id=f"w-{index}"):
                lifecycle.ack(job.id, worker_id=f"w-{index}")

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        run_threads(threads, worker)
    finally:
        done.set()
        watcher.join(timeout=30)
    return max(peaks)


@pytest.mark.django_db(transaction=True)
def test_concurrent_fetchers_never_exceed_the_concurrency_limit():
    _push(60, {"key": "db-heavy", "concurrency": 3})
    assert _race_fetchers(8 if connection.vendor == "postgresql" else 3) <= 3
    assert Job.objects.filter(state="completed").count() == 60


# ---------------------------------------------------------------------- queue limits


def test_queue_concurrency_limit_applies_to_every_job_of_the_queue():
    lifecycle.set_queue_limits("api", {"concurrency": 2})
    django_ojs.enqueue_many([{"type": "plain", "queue": "api"} for _ in range(3)])
    _push(2, {"key": "own", "concurrency": 5})
    first = _fetch()
    assert len(first) == 2 and _fetch() == []
    lifecycle.ack(first[0].id, worker_id="w-1")
    assert len(_fetch()) == 1
    lifecycle.set_queue_limits("api", None)
    assert len(_fetch()) == 2  # no queue limit: the other two start at once


def test_queue_limit_keeps_priority_order():
    lifecycle.set_queue_limits("api", {"concurrency": 1})
    django_ojs.enqueue("low", [], queue="api", priority=-5)
    high = django_ojs.enqueue("high", [], queue="api", priority=5)
    assert [j.id for j in _fetch()] == [high.id]


def test_queue_limits_are_validated():
    for bad, field in (({"concurrency": -1}, "limits.concurrency"),
                       ({"rate": {"limit": 1}}, "limits.rate"), ("5", "limits")):  # fmt: skip
        with pytest.raises(ValidationError) as info:
            lifecycle.set_queue_limits("api", bad)
        assert info.value.field == field


def test_http_queue_config():
    api = client("admin")
    put = api.request("PUT", "/queues/api/config", {"concurrency": 3})
    assert put.status_code == 200, put.body
    assert put.body["queue"]["limits"] == {"concurrency": 3}
    admin_path = api.request("PUT", "/admin/queues/api/config", {"limits": {"concurrency": 4}})
    assert admin_path.body["config"]["limits"] == {"concurrency": 4}
    assert api.get("/queues/api/config").body["config"]["limits"] == {"concurrency": 4}
    assert_ojs_error(api.request("PUT", "/queues/api/config", {"concurrency": "x"}), 400)
    assert_ojs_error(client("operator").request("PUT", "/queues/api/config", {}), 403)


def test_admin_sets_a_queue_limit(admin_client):
    from django.urls import reverse

    from django_ojs.models import AuditEntry, Queue

    django_ojs.enqueue("x", [], queue="api")
    url = reverse("admin:ojs_queue_changelist")
    form = admin_client.post(url, {"action": "set_limits", "_selected_action": ["api"]})
    assert form.status_code == 200 and "Max running jobs" in form.content.decode()
    bad = admin_client.post(url, {"action": "set_limits", "post": "yes",
                                  "_selected_action": ["api"], "concurrency": "many"})  # fmt: skip
    assert "whole number" in bad.content.decode()
    admin_client.post(url, {"action": "set_limits", "post": "yes",
                            "_selected_action": ["api"], "concurrency": "7"})  # fmt: skip
    assert Queue.objects.get(name="api").limits == {"concurrency": 7}
    assert AuditEntry.objects.filter(action="queue.limits").exists()
    assert ">7<" in admin_client.get(url).content.decode()


@pytest.mark.django_db(transaction=True)
def test_concurrent_fetchers_never_exceed_a_queue_limit():
    lifecycle.set_queue_limits("api", {"concurrency": 2})
    django_ojs.enqueue_many([{"type": "plain", "queue": "api"} for _ in range(40)])
    assert _race_fetchers(8 if connection.vendor == "postgresql" else 3) <= 2


def test_exceeded_and_released_events_once_per_change():
    from django_ojs.models import Event

    _push(3, {"key": "stripe", "concurrency": 1})
    (first,) = _fetch()
    assert _fetch() == [] and _fetch() == []
    exceeded = Event.objects.filter(type="rate_limit.exceeded")
    assert exceeded.count() == 1
    assert exceeded.get().data | {"queue": None} == {
        "key": "stripe", "strategy": "concurrency", "limit": 1, "current": 1, "queue": None,
    }  # fmt: skip
    lifecycle.ack(first.id, worker_id="w-1")
    (second,) = _fetch()
    released = Event.objects.get(type="rate_limit.released")
    assert released.data["key"] == "stripe" and released.data["job_id"] == str(second.id)
    assert Event.objects.filter(type="rate_limit.exceeded").count() == 1


def test_an_override_replaces_the_jobs_limits_until_removed_or_expired():
    _push(4, {"key": "partner", "concurrency": 3})
    lifecycle.override_rate_limit("partner", {"concurrency": 0})  # the partner is down
    assert _fetch() == []
    lifecycle.clear_rate_limit_override("partner")
    assert len(_fetch()) == 3
    lifecycle.override_rate_limit(
        "partner", {"concurrency": 9}, until=timezone.now() - timedelta(seconds=1)
    )
    assert _fetch() == []  # expired: the jobs' own limit (3 running) applies


def test_http_override():
    _push(2, {"key": "partner", "concurrency": 1})
    api = client("admin")
    put = api.request("PUT", "/rate-limits/partner",
                      {"concurrency": 0, "expires_at": "2099-01-01T00:00:00Z"})  # fmt: skip
    assert put.status_code == 200, put.body
    assert put.body["concurrency"]["limit"] == 0
    assert put.body["override"] == {"concurrency": 0, "expires_at": "2099-01-01T00:00:00.000Z"}
    assert _fetch() == []
    assert "override" not in api.delete("/rate-limits/partner").body
    assert len(_fetch()) == 1
    assert_ojs_error(api.request("PUT", "/rate-limits/partner", {"concurrency": -2}), 400)
    assert_ojs_error(api.request("PUT", "/rate-limits/partner", {"speed": 1}), 400)
    assert_ojs_error(client("operator").request("PUT", "/rate-limits/partner", {}), 403)
