"""Worker endpoints (HB §10): fetch, ack, nack, heartbeat and operator directives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.models import Event, Job, Worker
from tests.clock import ManualClock
from tests.factories import JobFactory, WorkerFactory
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


def past(seconds: float = 1):
    return timezone.now() - timedelta(seconds=seconds)


# --------------------------------------------------------------------------- fetch


def test_fetch__claims_in_queue_order_and_marks_active(api):
    low = api.enqueue("a.b", ["low"], queue="low")
    high = api.enqueue("a.b", ["high"], queue="high")
    response = api.post("/workers/fetch", {"queues": ["high", "low"], "worker_id": "w1"})
    jobs = response.body["jobs"]
    assert [j["id"] for j in jobs] == [high["id"]]
    assert response.body["job"]["id"] == high["id"]
    assert (jobs[0]["state"], jobs[0]["attempt"], jobs[0]["worker_id"]) == ("active", 1, "w1")
    assert jobs[0]["started_at"]
    assert api.fetch("low", worker_id="w1")[0]["id"] == low["id"]


def test_fetch__empty_queue_is_200_with_an_empty_list(api):
    response = api.post("/workers/fetch", {"queues": ["nothing-here"]})
    assert response.status_code == 200 and response.body == {"jobs": []}


def test_fetch__count_and_fifo(api):
    ids = [api.enqueue("a.b", [i], queue="fifo")["id"] for i in range(4)]
    jobs = api.fetch("fifo", count=3)
    assert [j["id"] for j in jobs] == ids[:3]


def test_fetch__without_worker_id_works(api):
    job = api.enqueue()
    assert api.fetch()[0]["id"] == job["id"]


def test_fetch__creates_an_unknown_worker(api):
    api.fetch(worker_id="brand-new")
    assert Worker.objects.filter(id="brand-new").exists()


@pytest.mark.django_db(transaction=True)
def test_fetch__records_a_polling_worker_once_a_second_and_every_new_one_at_once(monkeypatch):
    """A fetch of its own (HTTP: autocommit) writes its worker's row once per
    ``TOUCH_EVERY`` per process, not on every request; a new worker's at once."""
    from django_ojs.lifecycle import claim

    clock = ManualClock()
    monkeypatch.setattr(claim, "_clock", clock)
    monkeypatch.setattr(claim, "_touched", {})
    api = client("admin")
    api.fetch(worker_id="poller")
    first = Worker.objects.get(id="poller").last_heartbeat_at
    clock.now += claim.TOUCH_EVERY / 2
    api.fetch(worker_id="poller")
    assert Worker.objects.get(id="poller").last_heartbeat_at == first  # not written again
    api.fetch(worker_id="other")  # another worker: recorded at once
    assert Worker.objects.filter(id="other").exists()
    clock.now += claim.TOUCH_EVERY
    api.fetch(worker_id="other")
    Worker.objects.filter(id="other").update(last_heartbeat_at=past(30))
    clock.now += claim.TOUCH_EVERY
    api.fetch(worker_id="other")
    assert Worker.objects.get(id="other").last_heartbeat_at > past(10)  # a second later


# A beat or directive tells this process's fetches once committed (on_commit): these
# tests commit as HTTP requests do.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("state", ["quiet", "terminate"])
def test_fetch__a_worker_that_reported_quiet_gets_no_new_jobs(state):
    """Graceful shutdown §5.1: "the backend MUST NOT assign new jobs to a quiet worker"."""
    api = client("admin")
    api.enqueue("a.b", [1])
    api.enqueue("a.b", [2])
    held = api.fetch(worker_id="stopping")
    beat = api.post(
        "/workers/heartbeat",
        {"worker_id": "stopping", "state": state, "active_jobs": [held[0]["id"]]},
    )
    assert beat.status_code == 200 and beat.body["jobs_extended"] == [held[0]["id"]]
    assert api.fetch(worker_id="stopping") == []
    assert Job.objects.filter(state="available").count() == 1  # still there for others
    assert len(api.fetch(worker_id="another")) == 1
    assert (
        api.post("/workers/ack", {"job_id": held[0]["id"], "worker_id": "stopping"}).status_code
        == 200
    )  # it finishes what it holds


@pytest.mark.django_db(transaction=True)
def test_fetch__a_worker_back_to_running_gets_jobs_again():
    api = client("admin")
    api.enqueue("a.b", [1])
    api.post("/workers/heartbeat", {"worker_id": "paused", "state": "quiet"})
    assert api.fetch(worker_id="paused") == []
    api.post("/workers/heartbeat", {"worker_id": "paused", "state": "running"})  # SIGCONT
    assert len(api.fetch(worker_id="paused")) == 1


@pytest.mark.django_db(transaction=True)
def test_fetch__an_operator_directive_withholds_jobs_at_once():
    api = client("admin")
    api.enqueue("a.b", [1])
    api.fetch(worker_id="told", queues=["elsewhere"])  # known, running
    lifecycle.set_directive("told", "quiet")
    assert api.fetch(worker_id="told") == []
    lifecycle.set_directive("told", "running")
    assert len(api.fetch(worker_id="told")) == 1


@pytest.mark.django_db(transaction=True)
def test_fetch__a_state_recorded_by_another_process_counts_within_a_second(monkeypatch):
    """A process reads a fetching worker's state at most once a ``STOPPING_READ_EVERY``:
    a quiet heartbeat recorded by another web process stops its fetches here within
    that bound (the row is written here behind this process's back, as there)."""
    from django_ojs.lifecycle import workers

    clock = ManualClock()
    monkeypatch.setattr(workers, "_clock", clock)
    api = client("admin")
    for i in range(3):
        api.enqueue("a.b", [i])
    assert len(api.fetch(worker_id="remote")) == 1
    Worker.objects.filter(id="remote").update(state="quiet")  # another process's beat
    clock.now += workers.STOPPING_READ_EVERY / 2
    assert len(api.fetch(worker_id="remote")) == 1  # within the bound: not read yet
    clock.now += workers.STOPPING_READ_EVERY
    assert api.fetch(worker_id="remote") == []
    assert Job.objects.filter(state="available").count() == 1


def test_fetch__inside_a_transaction_always_records_its_worker():
    # A caller's transaction may roll back what the fetch wrote: nothing is remembered.
    from django_ojs.lifecycle import claim

    for _ in range(3):
        lifecycle.fetch(["default"], worker_id="in-atomic")
        assert Worker.objects.filter(id="in-atomic").exists()
        Worker.objects.filter(id="in-atomic").delete()
    assert not any(key[1] == "in-atomic" for key in claim._touched)


def test_fetch__visibility_timeout_ms_sets_the_reservation(api):
    api.enqueue()
    before = timezone.now()
    api.fetch(visibility_timeout_ms=5000)
    job = Job.objects.get()
    assert timedelta(seconds=4) < job.visible_until - before < timedelta(seconds=6)


def test_fetch__single_queue_alias(api):
    job = api.enqueue("a.b", [], queue="solo")
    assert api.post("/workers/fetch", {"queue": "solo"}).body["jobs"][0]["id"] == job["id"]


def test_fetch__skips_paused_queues(api):
    api.enqueue("a.b", [], queue="paused")
    api.post("/queues/paused/pause")
    assert api.fetch("paused") == []


def test_fetch__a_due_retry_is_claimed_at_once(api):
    job = JobFactory(retryable=True, queue="retry", next_attempt_at=past())
    assert api.fetch("retry")[0]["id"] == str(job.id)


def test_fetch__shows_the_backoff_the_retry_waited(api):
    job = api.enqueue(
        "a.b", [], queue="r", retry={"max_attempts": 3, "initial_interval": "PT1S", "jitter": False}
    )
    api.fetch("r")
    nack = api.post("/workers/nack", {"job_id": job["id"], "error": {"message": "x"}})
    assert nack.body["retry_delay_ms"] == 1000
    Job.objects.filter(pk=job["id"]).update(next_attempt_at=past())
    assert api.fetch("r")[0]["retry_delay_ms"] == 1000


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "queues"),
        ({"queues": []}, "queues"),
        ({"queues": "default"}, "queues"),
        ({"queues": ["Bad!"]}, "queues"),
        ({"queues": ["default"], "count": 0}, "count"),
        ({"queues": ["default"], "count": 1001}, "count"),
        ({"queues": ["default"], "visibility_timeout_ms": -1}, "visibility_timeout_ms"),
        ({"queues": ["default"], "worker_id": 5}, "worker_id"),
    ],
)
def test_fetch__invalid_requests_are_400(api, body, field):
    error = assert_ojs_error(api.post("/workers/fetch", body), 400, "invalid_payload")
    assert error["details"]["field"] == field


# --------------------------------------------------------------------------- ack


def test_ack__completes_with_any_json_result(api):
    job = api.enqueue()
    api.fetch()
    response = api.post("/workers/ack", {"job_id": job["id"], "result": ["a", 1]})
    body = response.body
    assert response.status_code == 200
    assert body["acknowledged"] is True and body["job_id"] == body["id"] == job["id"]
    assert body["state"] == "completed" and body["completed_at"]
    # HB §10.2's fields (and id): the whole job is read with GET /jobs/{id}.
    assert set(body) == {"acknowledged", "job_id", "id", "state", "completed_at"}
    stored = api.get(f"/jobs/{job['id']}").body["job"]
    assert stored["result"] == ["a", 1] and stored["completed_at"] == body["completed_at"]


def test_ack__clears_the_previous_error(api):
    job = JobFactory(active=True, error={"code": "handler_error", "message": "x"})
    api.post("/workers/ack", {"job_id": str(job.id)})
    assert "error" not in api.get(f"/jobs/{job.id}").body["job"]


def test_ack__a_job_that_is_not_active_is_409_conflict(api):
    job = api.enqueue()
    error = assert_ojs_error(api.post("/workers/ack", {"job_id": job["id"]}), 409, "conflict")
    assert error["details"]["current_state"] == "available"
    assert error["retryable"] is False


def test_ack__by_another_worker_is_409(api):
    job = JobFactory(active=True, worker_id="holder")
    error = assert_ojs_error(
        api.post("/workers/ack", {"job_id": str(job.id), "worker_id": "intruder"}), 409, "conflict"
    )
    assert error["details"]["reserved_by"] == "holder"


def test_ack__unknown_job_is_404(api):
    body = {"job_id": "01961111-aaaa-7bbb-8ccc-dddddddddddd"}
    assert_ojs_error(api.post("/workers/ack", body), 404, "not_found")


def test_ack__missing_job_id_is_400(api):
    error = assert_ojs_error(api.post("/workers/ack", {"result": 1}), 400, "invalid_payload")
    assert error["details"]["field"] == "job_id"


# --------------------------------------------------------------------------- nack


def test_nack__retryable_with_next_attempt(api):
    job = JobFactory(
        active=True, retry={"max_attempts": 3, "initial_interval": "PT2S", "jitter": False}
    )
    body = api.post(
        "/workers/nack",
        {"job_id": str(job.id), "error": {"code": "handler_error", "message": "boom"}},
    ).body
    assert (body["id"], body["state"], body["attempt"], body["max_attempts"]) == (
        str(job.id),
        "retryable",
        1,
        3,
    )
    assert body["next_attempt_at"] and body["retry_delay_ms"] == 2000
    stored = api.get(f"/jobs/{job.id}").body["job"]
    assert stored["error"]["message"] == "boom" and stored["error"]["type"] == "handler_error"
    assert stored["errors"][0]["attempt"] == 1 and stored["errors"][0]["occurred_at"]


def test_nack__exhausted_is_discarded_with_times(api):
    job = JobFactory(active=True, retry={"max_attempts": 1})
    body = api.post("/workers/nack", {"job_id": str(job.id), "error": {"message": "x"}}).body
    assert body["state"] == "discarded"
    assert body["discarded_at"] and body["completed_at"]


def test_nack__retryable_false_discards_at_once(api):
    job = JobFactory(active=True, retry={"max_attempts": 5})
    error = {"code": "handler_error", "message": "fatal", "retryable": False}
    assert api.post("/workers/nack", {"job_id": str(job.id), "error": error}).body["state"] == (
        "discarded"
    )


def test_nack__core_error_shape_with_type_matches_non_retryable_errors(api):
    job = JobFactory(active=True, retry={"max_attempts": 5, "non_retryable_errors": ["auth.*"]})
    error = {"type": "auth.expired", "message": "token", "backtrace": ["a.py:1"]}
    body = api.post("/workers/nack", {"job_id": str(job.id), "error": error}).body
    assert body["state"] == "discarded"
    stored = Job.objects.get(pk=job.pk).error
    assert stored["type"] == "auth.expired" and stored["backtrace"] == ["a.py:1"]


def test_nack__string_error_and_sdk_traceback(api):
    job = JobFactory(active=True)
    api.post("/workers/nack", {"job_id": str(job.id), "error": "plain message"})
    assert Job.objects.get(pk=job.pk).error["message"] == "plain message"
    job2 = JobFactory(active=True)
    sdk = {"code": "handler_error", "message": "m", "details": {"traceback": "l1\nl2"}}
    api.post("/workers/nack", {"job_id": str(job2.id), "error": sdk})
    assert Job.objects.get(pk=job2.pk).error["backtrace"] == ["l1", "l2"]


def test_nack__requeue_returns_the_job_to_available(api):
    job = JobFactory(active=True, retry={"max_attempts": 3})
    body = api.post(
        "/workers/nack", {"job_id": str(job.id), "error": {"message": "x"}, "requeue": True}
    ).body
    assert body["state"] == "available"


def test_nack__a_job_that_is_not_active_is_409(api):
    job = JobFactory(completed=True)
    assert_ojs_error(
        api.post("/workers/nack", {"job_id": str(job.id), "error": {"message": "x"}}),
        409,
        "conflict",
    )


# --------------------------------------------------------------------------- heartbeat


def test_heartbeat__extends_listed_jobs_and_says_running(api):
    job = JobFactory(active=True, worker_id="w1", visible_until=timezone.now())
    response = api.post(
        "/workers/heartbeat",
        {"worker_id": "w1", "active_jobs": [str(job.id)], "visibility_timeout_ms": 60000},
    )
    body = response.body
    assert response.status_code == 200
    assert (body["state"], body["directive"], body["jobs_extended"]) == (
        "running",
        "",
        [str(job.id)],
    )
    assert body["server_time"]
    assert Job.objects.get(pk=job.pk).visible_until > timezone.now() + timedelta(seconds=50)


def test_heartbeat__worker_protocol_shape_with_a_count_and_ids(api):
    job = JobFactory(active=True, worker_id="w2")
    body = api.post(
        "/workers/heartbeat",
        {
            "worker_id": "w2",
            "state": "running",
            "active_jobs": 1,
            "active_job_ids": [str(job.id)],
            "hostname": "box",
            "pid": 42,
            "queues": ["default"],
            "concurrency": 4,
        },
    ).body
    assert body["jobs_extended"] == [str(job.id)]
    worker = Worker.objects.get(id="w2")
    assert (worker.hostname, worker.pid, worker.concurrency) == ("box", 42, 4)


def test_heartbeat__single_job_id_alias(api):
    job = JobFactory(active=True, worker_id="w3")
    body = api.post("/workers/heartbeat", {"worker_id": "w3", "job_id": str(job.id)}).body
    assert body["jobs_extended"] == [str(job.id)]


def test_heartbeat__creates_an_unknown_worker(api):
    api.post("/workers/heartbeat", {"worker_id": "never-seen"})
    assert Worker.objects.filter(id="never-seen").exists()


@pytest.mark.django_db(transaction=True)
def test_heartbeat__without_jobs_writes_the_row_in_one_statement_and_keeps_its_fields():
    """A beat with nothing to extend is the worker's row alone, with no transaction
    around it: on PostgreSQL one UPDATE that returns the directive, elsewhere an UPDATE
    and the read of the directive; the first beat creates the row."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    lifecycle.beat("lean", hostname="host-a", pid=7, queues=["email"], concurrency=4)
    first = Worker.objects.get(id="lean")
    assert (first.hostname, first.pid, first.queues, first.concurrency) == (
        "host-a", 7, ["email"], 4,
    )  # fmt: skip
    lifecycle.set_directive("lean", "quiet")
    with CaptureQueriesContext(connection) as captured:
        reply = lifecycle.beat("lean", state="quiet")
    statements = [q["sql"] for q in captured.captured_queries]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 2), statements
    assert reply.directive == "quiet"
    again = Worker.objects.get(id="lean")
    assert again.state == "quiet" and again.hostname == "host-a"  # fields not sent are kept
    assert again.last_heartbeat_at > first.last_heartbeat_at
    assert again.started_at == first.started_at


def test_heartbeat__does_not_extend_another_workers_job(api):
    job = JobFactory(active=True, worker_id="owner")
    body = api.post("/workers/heartbeat", {"worker_id": "other", "active_jobs": [str(job.id)]}).body
    assert body["jobs_extended"] == []


def test_heartbeat__reports_jobs_cancelled_meanwhile(api):
    job = JobFactory(active=True, worker_id="w4")
    api.delete(f"/jobs/{job.id}")
    body = api.post("/workers/heartbeat", {"worker_id": "w4", "active_jobs": [str(job.id)]}).body
    assert body["jobs_extended"] == [] and body["cancelled_jobs"] == [str(job.id)]


@pytest.mark.parametrize("directive", ["quiet", "terminate"])
def test_heartbeat__operator_directive_is_delivered(api, directive):
    WorkerFactory(id="w5")
    lifecycle.set_directive("w5", directive)
    body = api.post("/workers/heartbeat", {"worker_id": "w5"}).body
    assert (body["state"], body["directive"]) == (directive, directive)
    lifecycle.set_directive("w5", "running")
    body = api.post("/workers/heartbeat", {"worker_id": "w5"}).body
    assert (body["state"], body["directive"]) == ("running", "")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "worker_id"),
        ({"worker_id": ""}, "worker_id"),
        ({"worker_id": "w", "active_jobs": "x"}, "active_jobs"),
        ({"worker_id": "w", "active_job_ids": [1]}, "active_job_ids"),
        ({"worker_id": "w", "state": "active"}, "state"),
        ({"worker_id": "w", "pid": -1}, "pid"),
        ({"worker_id": "w", "visibility_timeout": "soon"}, "visibility_timeout"),
    ],
)
def test_heartbeat__invalid_requests_are_400(api, body, field):
    error = assert_ojs_error(api.post("/workers/heartbeat", body), 400, "invalid_payload")
    assert error["details"]["field"] == field


def test_worker_endpoints__need_a_body(api):
    for path in ("/workers/fetch", "/workers/ack", "/workers/nack", "/workers/heartbeat"):
        assert_ojs_error(api.post(path), 400, "invalid_payload")


# --------------------------------------------------------------------------- progress


def test_progress__sdk_shape_records_an_event(api):
    job = JobFactory(active=True, worker_id="w6")
    body = api.post(
        "/workers/progress",
        {"job_id": str(job.id), "percentage": 40, "message": "page 4/10", "worker_id": "w6"},
    ).body
    assert body == {"job_id": str(job.id), "accepted": True, "progress": 0.4, "percentage": 40.0}
    event = Event.objects.get(job_id=job.id, type="job.progress")
    assert event.data["progress"] == 0.4 and event.data["progress_message"] == "page 4/10"


def test_progress__extension_shape_on_the_job_path_is_clamped(api):
    job = JobFactory(active=True)
    body = api.request("PUT", f"/jobs/{job.id}/progress", {"progress": 1.7, "data": {"n": 1}})
    assert body.status_code == 200 and body.body["progress"] == 1.0


def test_progress__for_a_job_that_is_not_active_is_ignored(api):
    job = JobFactory(completed=True)
    body = api.post("/workers/progress", {"job_id": str(job.id), "percentage": 10}).body
    assert body["accepted"] is False
    assert not Event.objects.filter(job_id=job.id, type="job.progress").exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"job_id": "x"}, "percentage"),
        ({"job_id": "x", "progress": "half"}, "progress"),
        ({"percentage": 5}, "job_id"),
        ({"job_id": "x", "percentage": 5, "message": 3}, "message"),
        ({"job_id": "x", "percentage": 5, "data": []}, "data"),
    ],
)
def test_progress__invalid_requests_are_400(api, body, field):
    error = assert_ojs_error(api.post("/workers/progress", body), 400, "invalid_payload")
    assert error["details"]["field"] == field
