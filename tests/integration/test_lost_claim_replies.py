"""A claim whose reply never reached its worker is handed back by the worker's heartbeat.

A pooler restart or a cut connection can lose the reply of a claim that committed: the
job is ``active`` for a worker that never got it. A heartbeat that vouches for its list
(``as_of``) releases such jobs at once, their attempt not spent; a job in the list, or
claimed after ``as_of`` (its fetch still in flight), is never released.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Event, Job, Worker
from django_ojs.registry import Registry
from django_ojs.worker import Worker as OJSWorker


def kinds(pk) -> list[str]:
    return list(Event.objects.filter(job_id=pk).order_by("seq").values_list("type", flat=True))


def claim(queue: str = "default", worker_id: str = "w1", count: int = 1) -> list[Job]:
    jobs = lifecycle.fetch([queue], count, worker_id=worker_id)
    assert len(jobs) == count
    return jobs


@pytest.mark.django_db
def test_a_claim_missing_from_a_vouched_heartbeat_is_released_with_its_attempt_unspent():
    pushed = django_ojs.enqueue("a")
    (job,) = claim()
    assert job.attempt == 1
    lifecycle.beat("w1", active_job_ids=[], as_of=timezone.now())
    stored = Job.objects.get(pk=pushed.pk)
    assert (stored.state, stored.attempt, stored.error, stored.errors) == ("available", 0, None, [])
    assert stored.visible_until is None and stored.timeout_at is None
    released = Event.objects.get(job_id=job.id, type="job.released")
    assert released.data["worker_id"] == "w1" and released.data["attempt"] == 1
    assert released.data["reason"] == "claim_not_received"
    assert "job.failed" not in kinds(job.id)
    # The next claim is the job's first attempt, not its second.
    (again,) = claim(worker_id="w2")
    assert (again.id, again.attempt) == (job.id, 1)
    lifecycle.ack(again.id, worker_id="w2")
    assert Job.objects.get(pk=job.pk).state == "completed"


@pytest.mark.django_db
def test_a_job_in_the_heartbeat_is_never_released():
    django_ojs.enqueue_many([{"type": "a", "args": [i]} for i in range(3)])
    held, lost, also = claim(count=3)
    later = timezone.now() + timedelta(hours=1)
    for _ in range(3):
        beat = lifecycle.beat("w1", active_job_ids=[str(held.id), str(also.id)], as_of=later)
        assert set(beat.jobs_extended) == {str(held.id), str(also.id)}
    assert Job.objects.get(pk=held.pk).state == "active"
    assert Job.objects.get(pk=also.pk).state == "active"
    assert Job.objects.get(pk=lost.pk).state == "available"
    assert not Event.objects.filter(job_id__in=[held.id, also.id], type="job.released").exists()
    lifecycle.ack(held.id, worker_id="w1")


@pytest.mark.django_db
def test_a_claim_after_the_heartbeats_as_of_is_kept():
    # The heartbeat's list was built while this fetch was in flight: the job may be on
    # its way to the worker, so it stays active.
    django_ojs.enqueue("a")
    as_of = timezone.now()
    (job,) = claim()
    lifecycle.beat("w1", active_job_ids=[], as_of=as_of)
    assert Job.objects.get(pk=job.pk).state == "active"


@pytest.mark.django_db
def test_without_as_of_or_for_another_worker_nothing_is_released():
    django_ojs.enqueue_many([{"type": "a"}, {"type": "a"}])
    (mine,) = claim(worker_id="w1")
    (theirs,) = claim(worker_id="w2")
    lifecycle.beat("w1", active_job_ids=[])  # an HTTP worker's BEAT: no as_of
    assert Job.objects.get(pk=mine.pk).state == "active"
    lifecycle.beat("w1", active_job_ids=[str(mine.id)], as_of=timezone.now())
    assert Job.objects.get(pk=theirs.pk).state == "active"


@pytest.mark.django_db
def test_a_job_settled_meanwhile_is_left_alone():
    django_ojs.enqueue("a")
    (job,) = claim()
    lifecycle.ack(job.id, worker_id="w1")
    lifecycle.beat("w1", active_job_ids=[], as_of=timezone.now())
    assert Job.objects.get(pk=job.pk).state == "completed"


# ------------------------------------------------------------------ the in-process worker


@pytest.fixture
def running_worker(wait_until):
    handlers = Registry()
    ran: list[tuple[str, int]] = []
    lock = threading.Lock()

    def slow(ctx):
        with lock:
            ran.append((str(ctx.job["id"]), ctx.attempt))
        time.sleep(0.8)  # several heartbeats while it runs

    handlers.register("slow", slow)

    worker = OJSWorker(
        queues=["held"], concurrency=4, poll_interval=0.05, heartbeat_interval=0.1,
        run_reaper=False, shutdown_grace_period=5.0, handlers=handlers,
    )  # fmt: skip
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(lambda: Worker.objects.filter(id=worker.worker_id).exists(), timeout=60)
    worker.ran = ran
    yield worker
    worker.terminate()
    thread.join(60)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_worker_hands_back_a_claim_it_never_received(running_worker, wait_until):
    # Claimed for the worker by someone else: to the worker, a claim whose reply was lost.
    pushed = django_ojs.enqueue("a", queue="elsewhere")
    (job,) = claim("elsewhere", worker_id=running_worker.worker_id)
    wait_until(lambda: Job.objects.get(pk=pushed.pk).state == "available", timeout=60)
    stored = Job.objects.get(pk=pushed.pk)
    assert stored.attempt == 0 and stored.errors == []
    assert "job.released" in kinds(job.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_worker_never_hands_back_a_job_it_runs(running_worker, wait_until):
    pushed = django_ojs.enqueue_many([{"type": "slow", "queue": "held"} for _ in range(6)])
    ids = [p.pk for p in pushed]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state="completed").count() == len(ids), timeout=60
    )
    assert not Event.objects.filter(job_id__in=ids, type="job.released").exists()
    assert sorted(a for _, a in running_worker.ran) == [1] * len(ids)
    assert Event.objects.filter(job_id__in=ids, type="job.heartbeat").exists()
