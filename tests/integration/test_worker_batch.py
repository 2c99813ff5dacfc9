"""Batched outcomes (``lifecycle.ack_many`` / ``fail_many``) as the worker writes them.

On PostgreSQL ``ack_many`` is one statement; with an ``event_emitted`` listener it takes
the ORM path, so both paths are checked against each other.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_ojs
from django_ojs import lifecycle, resilience, signals
from django_ojs.exceptions import ValidationError
from django_ojs.models import Event, Job

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["fast", "orm"])
def path(request):
    """Run a test through the driver's one-statement path and through the ORM path."""
    if request.param == "fast":
        yield request.param
        return
    received = []

    def listener(sender, event, **kwargs):
        received.append(event)

    signals.event_emitted.connect(listener)
    try:
        yield request.param
    finally:
        signals.event_emitted.disconnect(listener)


def claim(n, worker="w1", **options):
    for i in range(n):
        django_ojs.enqueue("batch.job", [i], **options)
    return lifecycle.fetch(["default"], n, worker_id=worker)


def test_ack_many__completes_owned_attempts_with_results_and_events(path):
    jobs = claim(3, meta={"trace_id": "abc"})
    with CaptureQueriesContext(connection) as queries:
        done = lifecycle.ack_many(
            [(jobs[0].id, 1, {"ok": True}), (str(jobs[1].id), 1, None), (jobs[2].id, 1, [1, "x"])],
            worker_id="w1",
        )
    if connection.vendor == "postgresql" and path == "fast":
        assert len(queries) == 1  # one statement, in autocommit
    assert sorted(done) == sorted(j.id for j in jobs)
    stored = {j.id: j for j in Job.objects.all()}
    assert stored[jobs[0].id].result == {"ok": True}
    assert stored[jobs[1].id].result is None
    assert stored[jobs[2].id].result == [1, "x"]
    for j in stored.values():
        assert j.state == "completed" and j.completed_at is not None and j.error is None
        assert j.visible_until is None and j.timeout_at is None and j.stalled_at is None
    events = {e.job_id: e for e in Event.objects.filter(type="job.completed")}
    assert len(events) == 3
    data = events[jobs[0].id].wire_data
    assert data["job_id"] == str(jobs[0].id) and data["job_type"] == "batch.job"
    assert data["queue"] == "default" and data["state"] == "completed"
    assert data["attempt"] == 1 and data["trace_id"] == "abc"
    assert data["result"] == {"ok": True} and isinstance(data["duration_ms"], int)
    assert "result" not in events[jobs[1].id].data  # None results are left out, as ack does
    assert events[jobs[0].id].subject == str(jobs[0].id)


def test_ack_many__skips_attempts_that_are_no_longer_this_workers(path):
    mine, cancelled, other_attempt = claim(3)
    theirs = claim(1, worker="w2")[0]
    lifecycle.cancel(cancelled.id)
    done = lifecycle.ack_many(
        [
            (mine.id, 1, "a"),
            (cancelled.id, 1, "b"),  # cancelled meanwhile
            (other_attempt.id, 2, "c"),  # a later attempt than the one reported
            (theirs.id, 1, "d"),  # reserved by another worker (worker protocol §5.6)
        ],
        worker_id="w1",
    )
    assert done == [mine.id]
    assert Job.objects.get(pk=cancelled.id).state == "cancelled"
    assert Job.objects.get(pk=other_attempt.id).state == "active"
    assert Job.objects.get(pk=theirs.id).state == "active"
    assert Event.objects.filter(type="job.completed").count() == 1


def test_ack_many__needs_a_worker_and_accepts_nothing():
    with pytest.raises(ValueError):
        lifecycle.ack_many([], worker_id="")
    assert lifecycle.ack_many([], worker_id="w1") == []


def test_ack_many__splits_large_batches(monkeypatch):
    from django_ojs.lifecycle import batch

    monkeypatch.setattr(batch, "MAX_BATCH", 2)
    jobs = claim(5)
    done = lifecycle.ack_many([(j.id, 1, None) for j in jobs], worker_id="w1")
    assert len(done) == 5 and Job.objects.filter(state="completed").count() == 5


def test_ack_many__without_stored_events(settings, path):
    settings.OJS_STORE_EVENTS = False
    (j,) = claim(1)
    assert lifecycle.ack_many([(j.id, 1, 1)], worker_id="w1") == [j.id]
    assert Job.objects.get(pk=j.id).state == "completed"
    assert not Event.objects.exists()


def test_fail_many__applies_the_retry_policy_and_timeout_events():
    timed_out, requeued, last, theirs = claim(4, retry={"max_attempts": 2})
    stale = claim(1)[0]
    Job.objects.filter(pk=last.id).update(max_attempts=1, retry=None)
    done = lifecycle.fail_many(
        [
            (timed_out.id, 1, {"type": "timeout", "code": "timeout", "message": "t",
                               "timeout_kind": "execution", "limit_seconds": 1}, False),
            (requeued.id, 1, {"type": "shutdown", "message": "bye", "retryable": True}, True),
            (last.id, 1, "plain message", False),
            (stale.id, 2, "wrong attempt", False),
        ],
        worker_id="w1",
    )  # fmt: skip
    assert sorted(done) == sorted([timed_out.id, requeued.id, last.id])
    t = Job.objects.get(pk=timed_out.id)
    assert t.state == "retryable" and t.error["timeout_kind"] == "execution"
    assert Event.objects.filter(job_id=t.id, type="job.timeout").exists()
    r = Job.objects.get(pk=requeued.id)
    assert r.state == "available" and r.error["type"] == "shutdown"
    lst = Job.objects.get(pk=last.id)
    assert lst.state == "discarded" and lst.error["message"] == "plain message"
    assert Job.objects.get(pk=stale.id).state == "active"
    assert Job.objects.get(pk=theirs.id).state == "active"
    assert lifecycle.fail_many([(theirs.id, 1, "x", False)], worker_id="w2") == []


def test_fail_many__an_unusable_error_report_is_still_recorded():
    (j,) = claim(1, retry={"max_attempts": 1})
    lifecycle.fail_many([(j.id, 1, {"message": 5}, False)], worker_id="w1")
    stored = Job.objects.get(pk=j.id)
    assert stored.state == "discarded" and stored.error["type"] == "invalid_error"


def test_report_progress__emits_an_event_for_active_jobs_only():
    (j,) = claim(1)
    assert lifecycle.report_progress(j.id, 0.25, message="a quarter", worker_id="w1")
    event = Event.objects.get(type="job.progress")
    assert event.data["progress"] == 0.25 and event.data["progress_percent"] == 25.0
    assert event.data["progress_message"] == "a quarter" and event.data["worker_id"] == "w1"
    with pytest.raises(ValidationError):
        lifecycle.report_progress(j.id, "half")
    assert lifecycle.report_progress(j.id, 2)  # clamped, as over HTTP (progress ext. §5)
    assert Event.objects.filter(type="job.progress").last().data["progress"] == 1.0
    lifecycle.ack(j.id)
    assert lifecycle.report_progress(j.id, 0.5) is False


# --------------------------------------------------------------- unstorable outcomes (issue 9)


@pytest.mark.parametrize(
    ("poison", "cause"),
    [
        ({"text": "a\u0000b"}, "result.text must not contain the NUL character"),
        (["\ud800"], "result[0] must not contain an unpaired UTF-16 surrogate"),
    ],
)
def test_ack_many__an_unstorable_result_fails_its_job_alone(path, poison, cause):
    good = claim(5)
    (bad,) = claim(1, retry={"max_attempts": 3})
    items = [(j.id, 1, {"n": i}) for i, j in enumerate(good)]
    items.insert(2, (bad.id, 1, poison))
    done = lifecycle.ack_many(items, worker_id="w1")
    assert sorted(done) == sorted(j.id for j in good)
    for i, j in enumerate(good):
        stored = Job.objects.get(pk=j.id)
        assert stored.state == "completed" and stored.result == {"n": i}
    stored = Job.objects.get(pk=bad.id)
    # Not retryable: the handler succeeded, running it again would repeat its effects.
    assert stored.state == "discarded" and stored.result is None
    assert stored.error["type"] == stored.error["code"] == "result_not_storable"
    assert stored.error["retryable"] is False and cause in stored.error["message"]
    assert Event.objects.filter(job_id=bad.id, type="job.discarded").exists()


def test_ack_many__a_non_json_result_fails_its_job_alone():
    ok, bad = claim(2)
    assert lifecycle.ack_many([(ok.id, 1, 1), (bad.id, 1, object())], worker_id="w1") == [ok.id]
    assert Job.objects.get(pk=ok.id).state == "completed"
    stored = Job.objects.get(pk=bad.id)
    assert stored.state == "discarded" and stored.error["type"] == "invalid_result"


def test_fail_many__unstorable_characters_in_an_error_become_u_fffd():
    good = claim(3, retry={"max_attempts": 1})
    (bad,) = claim(1, retry={"max_attempts": 2})
    error = {
        "type": "ValueError",
        "message": "bad byte \u0000 and \ud800 here",
        "backtrace": ["line \u0000"],
        "details": {"k\u0000": "v"},
    }
    items = [(j.id, 1, f"plain {i}", False) for i, j in enumerate(good)]
    items.insert(1, (bad.id, 1, error, False))
    done = lifecycle.fail_many(items, worker_id="w1")
    assert sorted(done) == sorted(j.id for j in [*good, bad])
    for i, j in enumerate(good):
        stored = Job.objects.get(pk=j.id)
        assert stored.state == "discarded" and stored.error["message"] == f"plain {i}"
    stored = Job.objects.get(pk=bad.id)
    # The handler's own error, retried by its policy; only the characters are replaced.
    assert stored.state == "retryable" and stored.error["type"] == "ValueError"
    assert stored.error["message"] == "bad byte \ufffd and \ufffd here"
    assert stored.error["backtrace"] == ["line \ufffd"]
    assert stored.error["details"] == {"k\ufffd": "v"}


@pytest.mark.django_db(transaction=True)
def test_outcome_writer__a_result_the_database_refuses_is_isolated(monkeypatch):
    """Past validation (bypassed here), PostgreSQL refuses the whole statement: the worker's
    writer splits the batch, writes the others at once and fails the refused one."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores a NUL inside JSON text; only PostgreSQL refuses it")
    from django_ojs.lifecycle import batch
    from django_ojs.worker import completion
    from django_ojs.worker.messages import Outcome

    monkeypatch.setattr(batch, "validation", SimpleNamespace(check_json=lambda value, _: value))

    def sleep(seconds):
        raise AssertionError(f"the writer waited {seconds}s on a refused batch")

    monkeypatch.setattr(resilience.time, "sleep", sleep)  # the back-off sleeps there
    jobs = claim(40)
    writer = completion.Completer("w1", using=None, on_written=lambda ids: None)
    writer.start()
    for i, j in enumerate(jobs):
        writer.put(j.id, 1, Outcome(True, result="a\u0000b" if i == 13 else {"n": i}))
    writer.stop(timeout=60)
    for i, j in enumerate(jobs):
        stored = Job.objects.get(pk=j.id)
        if i != 13:
            assert stored.state == "completed" and stored.result == {"n": i}
    bad = Job.objects.get(pk=jobs[13].id)
    assert bad.state == "discarded" and bad.error["type"] == "result_not_storable"
    assert "DataError" in bad.error["message"] and bad.error["retryable"] is False
    assert writer.completed == 39 and writer.failed == 1
