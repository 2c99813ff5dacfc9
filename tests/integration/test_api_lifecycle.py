"""The lifecycle additions the HTTP binding relies on, tested at the Python level.

Lazy promotion in ``fetch``, ``cancel(idempotent=False)``, the retry delay kept in the
error entry, and ``purge_all`` (the reset of the conformance runs).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.exceptions import InvalidTransition
from django_ojs.models import ApiKey, Event, Job, Queue, Worker
from tests.factories import JobFactory, QueueFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def past(seconds: float = 1) -> datetime:
    return timezone.now() - timedelta(seconds=seconds)


def test_fetch__claims_a_due_retryable_job_without_waiting_for_the_reaper():
    job = JobFactory(retryable=True, queue="retry", next_attempt_at=past())
    claimed = lifecycle.fetch(["retry"], worker_id="w1")
    assert [j.id for j in claimed] == [job.id]
    job.refresh_from_db()
    assert (job.state, job.attempt, job.next_attempt_at) == ("active", 2, None)


def test_fetch__claims_a_due_scheduled_job_and_records_its_enqueue():
    job = JobFactory(scheduled=True, queue="later", scheduled_at=past())
    claimed = lifecycle.fetch(["later"])
    assert [j.id for j in claimed] == [job.id]
    kinds = list(Event.objects.filter(job_id=job.id).values_list("type", flat=True))
    assert kinds == ["job.enqueued", "job.started"]


def test_fetch__leaves_jobs_that_are_not_due_and_other_queues_alone():
    waiting = JobFactory(retryable=True, queue="retry")  # next attempt in 30 s
    elsewhere = JobFactory(retryable=True, queue="other", next_attempt_at=past())
    assert lifecycle.fetch(["retry"]) == []
    assert Job.objects.get(pk=waiting.pk).state == "retryable"
    assert Job.objects.get(pk=elsewhere.pk).state == "retryable"


def test_cancel__not_idempotent_refuses_an_already_cancelled_job():
    job = JobFactory(cancelled=True)
    assert lifecycle.cancel(job.id).state == "cancelled"  # the Python API: idempotent
    with pytest.raises(InvalidTransition) as info:
        lifecycle.cancel(job.id, idempotent=False)
    assert info.value.current_state == "cancelled"


def test_fail__retryable_error_entry_keeps_the_retry_delay():
    job = JobFactory(
        active=True, retry={"max_attempts": 3, "initial_interval": "PT2S", "jitter": False}
    )
    failed = lifecycle.fail(job.id, {"code": "handler_error", "message": "boom"})
    assert failed.state == "retryable"
    stored = Job.objects.get(pk=job.pk)
    assert stored.error["retry_delay_ms"] == 2000
    assert stored.errors[-1]["retry_delay_ms"] == 2000


def test_fail__discarding_error_entry_has_no_retry_delay():
    job = JobFactory(active=True, retry={"max_attempts": 1})
    lifecycle.fail(job.id, {"message": "boom"})
    assert "retry_delay_ms" not in Job.objects.get(pk=job.pk).error


def test_purge_all__empties_the_job_store_but_keeps_api_keys():
    JobFactory.create_batch(3)
    WorkerFactory()
    QueueFactory(name="email")
    lifecycle.enqueue("test.echo", ["x"])  # writes an event too
    ApiKey.objects.create(name="k", prefix="abcdefabcdef", hashed_secret="x", scope="admin")
    counts = lifecycle.purge_all()
    assert counts["jobs"] == 4 and counts["workers"] == 1 and counts["events"] >= 1
    assert not Job.objects.exists() and not Event.objects.exists()
    assert not Worker.objects.exists() and not Queue.objects.exists()
    assert ApiKey.objects.count() == 1
