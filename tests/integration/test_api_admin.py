"""The OJS admin API under /ojs/v1/admin/ (ojs-admin-api.md) and GET /jobs/{id}/progress."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job, Worker
from tests.factories import WorkerFactory
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

A = "/admin"


@pytest.fixture
def api(db):
    return client("admin")


def dead(n: int, *, queue: str = "mail", type: str = "email.send", args=None) -> list[Job]:
    """``n`` dead-lettered jobs."""
    out = []
    for i in range(n):
        job = django_ojs.enqueue(type, args if args is not None else [i], queue=queue)
        (claimed,) = lifecycle.fetch([queue], worker_id="w")
        out.append(
            lifecycle.fail(
                claimed.id,
                {"type": "SMTPError", "message": "refused", "retryable": False},
                worker_id="w",
            )
        )
        assert out[-1].id == job.id
    return out


def test_needs_the_admin_scope(db):
    assert client(None).get(f"{A}/stats").status_code == 401
    assert_ojs_error(client("operator").get(f"{A}/stats"), 403)
    assert_ojs_error(client("worker").post(f"{A}/jobs/bulk/retry", {"confirm": True}), 403)


def test_stats_and_queues(api):
    django_ojs.enqueue("a.x", queue="alpha")
    django_ojs.enqueue("a.y", queue="alpha", scheduled_at=timedelta(hours=1))
    dead(1, queue="beta")
    stats = api.get(f"{A}/stats")
    assert stats.status_code == 200
    assert stats.body["jobs"]["available"] == 1 and stats.body["jobs"]["discarded"] == 1
    assert {"queues", "workers", "throughput", "uptime_seconds"} <= set(stats.body)
    queues = api.get(f"{A}/queues").body
    by_name = {q["name"]: q for q in queues["items"]}
    assert by_name["alpha"]["counts"]["scheduled"] == 1 and by_name["alpha"]["state"] == "active"
    assert queues["pagination"]["page"] == 1
    detail = api.get(f"{A}/queues/alpha").body
    assert detail["counts"]["available"] == 1 and detail["oldest_available_at"]
    assert "retention" in detail["configuration"]
    assert_ojs_error(api.get(f"{A}/queues/nowhere"), 404)
    paused = api.post(f"{A}/queues/alpha/pause")
    assert paused.body["paused"] is True and paused.body["paused_at"]
    assert api.get(f"{A}/queues/alpha").body["state"] == "paused"
    assert api.post(f"{A}/queues/alpha/resume").body["paused"] is False
    history = api.get(f"{A}/stats/history?period=1m")
    assert history.status_code == 200 and history.body["period"] == "1m"
    assert sum(p["enqueued"] for p in history.body["data"]) >= 2
    assert_ojs_error(api.get(f"{A}/stats/history?period=7m"), 400)


def test_job_search_filters(api):
    django_ojs.enqueue("email.send", [{"to": "ada@example.com", "lang": "en"}], queue="m")
    django_ojs.enqueue("email.digest", [{"to": "bob@example.com"}], queue="m",
                       meta={"tenant": "acme"})  # fmt: skip
    django_ojs.enqueue("sms.send", [{"to": "+331"}], queue="s")
    dead(1, queue="d", type="email.bounce")

    def ids(query: str) -> list[str]:
        response = api.get(f"{A}/jobs?{query}")
        assert response.status_code == 200, response.body
        return sorted(j["type"] for j in response.body["items"])

    assert ids("type=email.*") == ["email.bounce", "email.digest", "email.send"]
    assert ids("type=email.send") == ["email.send"]
    assert ids("queue=m&state=available") == ["email.digest", "email.send"]
    assert ids("state=discarded,available&queue=d") == ["email.bounce"]
    assert ids('args=[{"to": "ada@example.com"}]') == ["email.send"]
    assert ids('meta={"tenant": "acme"}') == ["email.digest"]
    assert ids("error_type=SMTPError") == ["email.bounce"]
    assert ids("worker=w") == ["email.bounce"]
    future = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"since={future}") == []
    page = api.get(f"{A}/jobs?per_page=2&page=2&sort=created_at&order=asc").body
    assert page["pagination"] == {"total": 4, "page": 2, "per_page": 2}
    assert len(page["items"]) == 2
    for bad in ("state=nope", "args=notjson", "args={}", "meta=[1]", "per_page=0",
                "per_page=101", "page=x", "sort=type", "order=up", "since=yesterday",
                "type=a*b*"):  # fmt: skip
        assert_ojs_error(api.get(f"{A}/jobs?{bad}"), 400)


def test_job_detail_cancel_and_retry(api):
    job = django_ojs.enqueue("x.one", [1], queue="q")
    detail = api.get(f"{A}/jobs/{job.id}").body
    assert detail["id"] == str(job.id) and detail["args"] == [1]
    assert detail["metadata"]["created_at"] and "retry_policy" in detail
    assert_ojs_error(api.get(f"{A}/jobs/not-an-id"), 404)
    assert_ojs_error(api.get(f"{A}/jobs/01960000-0000-7000-8000-000000000000"), 404)
    cancelled = api.post(f"{A}/jobs/{job.id}/cancel")
    assert cancelled.body["state"] == "cancelled"
    assert_ojs_error(api.post(f"{A}/jobs/{job.id}/retry"), 409)  # cancelled is final
    (failed,) = dead(1)
    retried = api.post(f"{A}/jobs/{failed.id}/retry")
    assert (retried.body["state"], retried.body["attempt"]) == ("available", 0)


def test_bulk_retry_cancel_and_delete_with_confirm(api):
    failed = dead(3, type="email.send", args=[{"campaign": 7}])
    dead(2, type="email.other")
    body = {"filter": {"state": "discarded", "type": "email.send"}}
    assert_ojs_error(api.post(f"{A}/jobs/bulk/retry", body), 400)  # no confirm
    assert_ojs_error(api.post(f"{A}/jobs/bulk/retry", {**body, "confirm": "yes"}), 400)
    out = api.post(f"{A}/jobs/bulk/retry", {**body, "confirm": True}).body
    assert (out["action"], out["matched"], out["succeeded"], out["failed"]) == (
        "retry", 3, 3, 0,
    )  # fmt: skip
    assert set(
        Job.objects.filter(pk__in=[j.pk for j in failed]).values_list("state", flat=True)
    ) == {"available"}
    cancel = api.post(
        f"{A}/jobs/bulk/cancel",
        {"filter": {"args": [{"campaign": 7}]}, "confirm": True},
    ).body
    assert (cancel["matched"], cancel["succeeded"]) == (3, 3)
    delete = api.post(
        f"{A}/jobs/bulk/delete", {"filter": {"type": "email.*"}, "confirm": True}
    ).body
    assert (delete["matched"], delete["succeeded"], delete["failed"]) == (5, 5, 0)
    assert not Job.objects.exists()
    assert_ojs_error(api.post(f"{A}/jobs/bulk/delete", {"filter": {}, "confirm": True}), 400)
    assert_ojs_error(api.post(f"{A}/jobs/bulk/explode", {"confirm": True}), 404)
    # A live job is not deleted: reported as failed, left alone.
    live = django_ojs.enqueue("email.live", queue="mail")
    out = api.post(f"{A}/jobs/bulk/delete", {"filter": {"type": "email.*"}, "confirm": True}).body
    assert (out["succeeded"], out["failed"]) == (0, 1)
    assert out["errors"][0]["job_id"] == str(live.id)


def test_bulk_retry_of_1000_dead_letter_jobs_goes_in_batches(api):
    now = timezone.now()
    rows = [
        Job(type="big.fail", queue="big", args=[i], state="discarded", dead_letter=True,
            attempt=3, max_attempts=3, created_at=now, enqueued_at=now, discarded_at=now)
        for i in range(1000)
    ]  # fmt: skip
    Job.objects.bulk_create(rows)
    out = api.post(
        f"{A}/jobs/bulk/retry", {"filter": {"queue": "big", "state": "discarded"}, "confirm": True}
    ).body
    assert (out["matched"], out["succeeded"]) == (1000, 1000)
    assert Job.objects.filter(queue="big", state="available").count() == 1000


def test_queue_purge_and_dead_letter(api):
    done = django_ojs.enqueue("p.done", queue="pq")
    (claimed,) = lifecycle.fetch(["pq"], worker_id="w")
    lifecycle.ack(claimed.id, None, worker_id="w")
    waiting = django_ojs.enqueue("p.wait", queue="pq")
    assert_ojs_error(api.delete(f"{A}/queues/pq/jobs"), 400)
    assert_ojs_error(
        api.request("DELETE", f"{A}/queues/pq/jobs", {"states": ["available"], "confirm": True}),
        400,
    )
    purged = api.request(
        "DELETE", f"{A}/queues/pq/jobs", {"states": ["completed"], "confirm": True}
    )
    assert purged.body == {"purged_count": 1, "states": ["completed"]}
    assert (
        not Job.objects.filter(pk=done.pk).exists() and Job.objects.filter(pk=waiting.pk).exists()
    )
    failed = dead(2, queue="dq")
    listing = api.get(f"{A}/dead-letter?queue=dq").body
    assert listing["pagination"]["total"] == 2
    retried = api.post(f"{A}/dead-letter/{failed[0].id}/retry")
    assert retried.body["state"] == "available"
    assert_ojs_error(api.request("DELETE", f"{A}/dead-letter", {}), 400)
    gone = api.request("DELETE", f"{A}/dead-letter", {"queue": "dq", "confirm": True})
    assert gone.body == {"purged_count": 1}


def test_workers_quiet_and_deregister(api, settings):
    settings.OJS_WORKER_STALE_AFTER = 30
    alive = WorkerFactory(id="alive", queues=["default"])
    stale = WorkerFactory(id="stale", last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    django_ojs.enqueue("w.job")
    (claimed,) = lifecycle.fetch(["default"], worker_id="stale")
    Worker.objects.filter(pk=stale.pk).update(
        last_heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    listing = api.get(f"{A}/workers").body
    assert listing["summary"]["total"] == 2 and listing["summary"]["stale"] == 1
    detail = api.get(f"{A}/workers/stale").body
    assert detail["state"] == "stale" and detail["jobs"][0]["id"] == str(claimed.id)
    quiet = api.post(f"{A}/workers/{alive.id}/quiet")
    assert quiet.body["state"] == "quiet"
    assert_ojs_error(api.delete(f"{A}/workers/{alive.id}"), 409)
    out = api.delete(f"{A}/workers/{stale.id}").body
    assert out["deregistered"] is True and out["jobs_recovered"] == 1
    assert not Worker.objects.filter(pk=stale.pk).exists()
    assert Job.objects.get(pk=claimed.pk).state == "available"
    assert_ojs_error(api.get(f"{A}/workers/nobody"), 404)


def test_system_config_and_progress(api):
    assert api.get(f"{A}/system/config").body["retention_seconds"]["completed"] == 7 * 86400
    job = django_ojs.enqueue("pr.work", queue="pg")
    none_yet = api.get(f"/jobs/{job.id}/progress").body
    assert none_yet == {
        "job_id": str(job.id), "state": "available", "progress": None, "message": None,
        "data": None, "updated_at": None,
    }  # fmt: skip
    (claimed,) = lifecycle.fetch(["pg"], worker_id="w")
    lifecycle.report_progress(claimed.id, 0.47, message="rows", data={"done": 47}, worker_id="w")
    got = api.get(f"/jobs/{job.id}/progress").body
    assert (got["progress"], got["message"], got["data"]) == (0.47, "rows", {"done": 47})
    assert got["state"] == "active" and got["updated_at"]
    assert_ojs_error(api.get("/jobs/01960000-0000-7000-8000-000000000000/progress"), 404)


# ---------------------------------------------------------------- fixes of the first review


def test_a_queue_limited_admin_key_sees_and_changes_only_its_queues(db):
    from django_ojs import apikeys
    from tests.integration.api_support import OJSClient

    mine = dead(2, queue="billing.eu")
    theirs = dead(2, queue="hr")
    limited = OJSClient(apikeys.create("billing-admin", "admin", queues=["billing.*"])[1])
    listed = limited.get(f"{A}/jobs").body["items"]
    assert {j["queue"] for j in listed} == {"billing.eu"} and len(listed) == 2
    assert [j["queue"] for j in limited.get(f"{A}/dead-letter").body["items"]] == ["billing.eu"] * 2
    assert [q["name"] for q in limited.get(f"{A}/queues").body["items"]] == ["billing.eu"]
    # Another queue's job, queue, and the cluster-wide endpoints are refused.
    assert_ojs_error(limited.get(f"{A}/jobs/{theirs[0].id}"), 403)
    assert_ojs_error(limited.post(f"{A}/jobs/{theirs[0].id}/retry"), 403)
    assert_ojs_error(limited.post(f"{A}/dead-letter/{theirs[0].id}/retry"), 403)
    assert_ojs_error(limited.get(f"{A}/queues/hr"), 403)
    assert_ojs_error(limited.post(f"{A}/queues/hr/pause"), 403)
    for path in ("/stats", "/stats/history", "/workers", "/system/config"):
        assert_ojs_error(limited.get(f"{A}{path}"), 403)
    assert limited.get(f"{A}/stats/history?queue=billing.eu").status_code == 200
    # A bulk action with no filter touches only the key's queues.
    out = limited.post(f"{A}/jobs/bulk/retry", {"confirm": True, "filter": {}})
    assert out.status_code == 200 and out.body["succeeded"] == 2
    assert set(Job.objects.filter(pk__in=[j.id for j in mine]).values_list("state", flat=True)) == {
        "available"
    }
    assert set(
        Job.objects.filter(pk__in=[j.id for j in theirs]).values_list("state", flat=True)
    ) == {"discarded"}
    purge = limited.delete(f"{A}/dead-letter", body={"confirm": True})
    assert purge.status_code == 200 and purge.body["purged_count"] == 0
    assert Job.objects.filter(queue="hr").count() == 2


def test_a_misspelt_filter_is_refused_not_widened(api):
    jobs = dead(3, queue="mail")
    response = api.post(f"{A}/jobs/bulk/delete", {"confirm": True, "filter": {"queu": "mail"}})
    assert assert_ojs_error(response, 400)["details"]["field"] == "queu"
    response = api.post(f"{A}/jobs/bulk/retry", {"confirm": True, "filtr": {"queue": "x"}})
    assert assert_ojs_error(response, 400)["details"]["field"] == "filtr"
    assert_ojs_error(api.delete(f"{A}/dead-letter", body={"confirm": True, "queu": "x"}), 400)
    assert_ojs_error(api.get(f"{A}/jobs?stat=active"), 400)
    assert api.get(f"{A}/jobs?page=1&per_page=5&sort=priority&order=asc").status_code == 200
    assert Job.objects.filter(pk__in=[j.id for j in jobs], state="discarded").count() == 3


def test_malformed_filters_get_400_not_500(api):
    nested = "[" * 5000 + "]" * 5000
    assert_ojs_error(api.get(f"{A}/jobs?args={nested}"), 400)
    for states in ([["completed"]], [{"a": 1}], [1], [None]):
        response = api.delete(f"{A}/queues/q/jobs", body={"confirm": True, "states": states})
        assert_ojs_error(response, 400)
    for state in ([["x"]], [7]):
        response = api.post(f"{A}/jobs/bulk/cancel", {"confirm": True, "filter": {"state": state}})
        assert_ojs_error(response, 400)


def test_deregistering_one_stale_worker_leaves_the_others(api, settings):
    settings.OJS_WORKER_STALE_AFTER = 30
    old = timezone.now() - timedelta(minutes=5)
    for worker_id in ("stale-a", "stale-b"):
        WorkerFactory(id=worker_id)
        django_ojs.enqueue("w.job", queue=worker_id)
        lifecycle.fetch([worker_id], worker_id=worker_id)
    Worker.objects.update(last_heartbeat_at=old)
    out = api.delete(f"{A}/workers/stale-a").body
    assert out["jobs_recovered"] == 1
    assert list(Worker.objects.values_list("id", flat=True)) == ["stale-b"]
    assert Job.objects.get(queue="stale-b").state == "active"


def test_args_filter_sees_every_row_on_every_database(api):
    """The fragment is matched inside the query (SQLite: a registered function), so an
    old job is found behind any number of newer ones."""
    target = django_ojs.enqueue("report.build", [{"account": 42, "fmt": "pdf"}], queue="r")
    django_ojs.enqueue_many(
        [{"type": "report.build", "args": [{"account": i}], "queue": "r"}
         for i in range(300)]
    )  # fmt: skip
    found = api.get(f'{A}/jobs?args=[{{"account": 42, "fmt": "pdf"}}]').body["items"]
    assert [j["id"] for j in found] == [str(target.id)]
    assert api.get(f'{A}/jobs?meta={{"x": 1}}').body["items"] == []


def test_dead_letter_stats_detail_and_delete(api, settings):
    settings.OJS_RETENTION = {"dead_letter": 180 * 86400}
    mail = dead(2, queue="mail")
    (sms,) = dead(1, queue="sms")
    no_error = django_ojs.enqueue("x.y", [], queue="sms")
    lifecycle.discard(no_error.pk, reason="by hand")  # a dead letter without an error type
    django_ojs.enqueue("email.send", [9], queue="mail")  # alive: not counted

    for path in (f"{A}/dead-letter/stats", "/dead-letter/stats"):
        stats = api.get(path).body
        assert stats["total"] == 4
        assert stats["by_queue"] == {"mail": 2, "sms": 2}
        assert (
            stats["by_error_type"]["SMTPError"] == 3 and sum(stats["by_error_type"].values()) == 4
        )
        assert stats["oldest_at"] <= stats["newest_at"]
        assert stats["retention"]["max_age"] == "P180D" and stats["retention"]["next_prune_at"]

    settings.OJS_RETENTION = {"dead_letter": 36 * 3600}
    assert api.get("/dead-letter/stats").body["retention"]["max_age"] == "P1DT12H"

    detail = api.get(f"{A}/dead-letter/{sms.id}")
    assert detail.status_code == 200 and detail.body["id"] == str(sms.id)
    assert api.get(f"/dead-letter/{sms.id}").body["job"]["state"] == "discarded"
    alive = Job.objects.get(state="available")
    assert_ojs_error(api.get(f"{A}/dead-letter/{alive.id}"), 404, "not_found")
    assert_ojs_error(api.get(f"{A}/dead-letter/not-a-uuid"), 404, "not_found")

    deleted = api.delete(f"{A}/dead-letter/{mail[0].id}")
    assert deleted.status_code == 204
    assert not Job.objects.filter(pk=mail[0].id).exists()
    assert_ojs_error(api.delete(f"{A}/dead-letter/{alive.id}"), 404)
    assert Job.objects.filter(pk=alive.id).exists()


def test_dead_letter_stats_of_a_queue_limited_key(db):
    dead(1, queue="mail")
    dead(2, queue="sms")
    from django_ojs import apikeys
    from tests.integration.api_support import OJSClient

    limited = OJSClient(apikeys.create("mail-admin", "admin", queues=["mail"])[1])

    stats = limited.get(f"{A}/dead-letter/stats").body

    assert stats["total"] == 1 and stats["by_queue"] == {"mail": 1}


def test_job_lists_page_by_cursor_without_offset(api):
    ids = [str(django_ojs.enqueue("email.send", [i], queue="mail").id) for i in range(5)]
    newest_first = sorted(ids, reverse=True)  # UUIDv7: id order is creation order

    seen, cursor = [], ""
    for _ in range(5):
        body = api.get(f"{A}/jobs?per_page=2&cursor={cursor}").body
        seen += [j["id"] for j in body["items"]]
        assert "page" not in body["pagination"] and body["pagination"]["total"] == 5
        cursor = body["pagination"]["next_cursor"]
        if cursor is None:
            break

    assert seen == newest_first
    assert_ojs_error(api.get(f"{A}/jobs?cursor=nope"), 400)
    assert_ojs_error(api.get(f"{A}/jobs?cursor=&page=2"), 400)
    assert_ojs_error(api.get(f"{A}/jobs?cursor=&sort=priority"), 400)


def test_job_list_totals_are_estimated_above_the_exact_limit(api, monkeypatch):
    from django.db import connection

    from django_ojs import jobquery

    monkeypatch.setattr(jobquery, "EXACT_COUNT_LIMIT", 3)
    for i in range(5):
        django_ojs.enqueue("email.send", [i], queue="mail")

    pagination = api.get(f"{A}/jobs").body["pagination"]

    if connection.vendor == "postgresql":
        assert pagination["estimated"] is True and pagination["total"] >= 4
    else:
        assert pagination["total"] == 5 and "estimated" not in pagination
