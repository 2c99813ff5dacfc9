"""The time-driven lifecycle operations the reaper calls (timeouts §7-§8, worker protocol §10)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.models import Event, Job, Worker
from tests.factories import JobFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def later(seconds: float):
    return timezone.now() + timedelta(seconds=seconds)


def kinds(job):
    return list(Event.objects.filter(job_id=job.id).order_by("seq").values_list("type", flat=True))


def test_promote_due__scheduled_and_retryable_when_their_time_comes():
    scheduled = django_ojs.enqueue("a", scheduled_at=timedelta(seconds=30))
    retryable = JobFactory(retryable=True)
    assert lifecycle.promote_due() == 0
    assert lifecycle.promote_due(now=later(31)) == 2
    for job in (scheduled, retryable):
        stored = Job.objects.get(pk=job.pk)
        assert stored.state == "available" and stored.next_attempt_at is None
    assert kinds(scheduled) == ["job.scheduled", "job.enqueued"]
    assert [j.id for j in lifecycle.fetch(["default"], count=5)] == [scheduled.id, retryable.id]


def test_expire_stale__expires_at_discards_with_expired_error():
    job = django_ojs.enqueue(
        "a", expires_at=timedelta(seconds=5), scheduled_at=timedelta(seconds=10)
    )
    assert lifecycle.expire_stale() == 0
    assert lifecycle.expire_stale(now=later(6)) == 1
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "discarded" and stored.error["type"] == "expired"
    assert stored.error["expired_at"].endswith("Z")
    assert kinds(job)[-2:] == ["job.expired", "job.discarded"]


def test_expire_stale__enqueue_ttl():
    job = django_ojs.enqueue("a", enqueue_ttl=2)
    lifecycle.expire_stale(now=later(3))
    error = Job.objects.get(pk=job.pk).error
    assert (error["type"], error["timeout_kind"], error["limit_seconds"]) == (
        "enqueue_ttl_expired",
        "enqueue_ttl",
        2,
    )
    assert error["elapsed_seconds"] >= 2
    assert "job.ttl_expired" in kinds(job)


def test_expire_stale__enqueue_ttl_stops_applying_once_started():
    django_ojs.enqueue("a", enqueue_ttl=2, retry={"max_attempts": 3})
    job = lifecycle.fetch(["default"])[0]
    lifecycle.fail(job.id, "x")
    assert lifecycle.expire_stale(now=later(3)) == 0
    assert Job.objects.get(pk=job.pk).state == "retryable"


def test_expire_stale__total_timeout_of_a_waiting_job():
    job = django_ojs.enqueue("a", total_timeout=10, scheduled_at=timedelta(seconds=20))
    lifecycle.expire_stale(now=later(11))
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.error["type"], stored.error["timeout_kind"]) == (
        "discarded",
        "total_timeout",
        "total",
    )
    assert "job.total_timeout" in kinds(job)


def test_rescue_expired__lost_reservation_goes_back_to_available():
    django_ojs.enqueue("a", visibility_timeout=2)
    job = lifecycle.fetch(["default"], worker_id="w")[0]
    assert lifecycle.rescue_expired(now=later(1)) == 0
    assert lifecycle.rescue_expired(now=later(3)) == 1
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "available" and stored.error["type"] == "visibility_timeout"
    assert {"job.failed", "job.stalled"} <= set(kinds(job))
    again = lifecycle.fetch(["default"])[0]
    assert again.attempt == 2  # the lost attempt was counted when it was fetched


def test_rescue_expired__lost_reservation_on_the_last_attempt_discards():
    django_ojs.enqueue("a", visibility_timeout=1, retry={"max_attempts": 1})
    job = lifecycle.fetch(["default"])[0]
    lifecycle.rescue_expired(now=later(2))
    assert Job.objects.get(pk=job.pk).state == "discarded"


def test_rescue_expired__execution_timeout_follows_the_retry_policy(settings):
    settings.OJS_GRACE_PERIOD = 1
    django_ojs.enqueue(
        "a", timeout=2, visibility_timeout=600, retry={"max_attempts": 2, "jitter": False}
    )
    job = lifecycle.fetch(["default"], worker_id="w")[0]
    lifecycle.beat("w", active_job_ids=[job.id])  # heartbeats do not save a job past its timeout
    assert lifecycle.rescue_expired(now=later(2.5)) == 0  # inside the grace period
    assert lifecycle.rescue_expired(now=later(3.5)) == 1
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "retryable"
    error = stored.error
    assert (error["type"], error["timeout_kind"], error["limit_seconds"]) == (
        "timeout",
        "execution",
        2,
    )
    assert error["elapsed_seconds"] >= 3
    assert kinds(job)[-3:] == ["job.timeout", "job.failed", "job.retrying"]


def test_rescue_expired__stalled_job(settings):
    django_ojs.enqueue("a", heartbeat_timeout=5, visibility_timeout=600, retry={"max_attempts": 1})
    job = lifecycle.fetch(["default"], worker_id="w")[0]
    assert lifecycle.rescue_expired(now=later(6)) == 1
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.error["type"], stored.error["timeout_kind"]) == (
        "discarded",
        "stalled",
        "stalled",
    )
    assert "job.stalled" in kinds(job)


def test_rescue_expired__heartbeat_resets_the_stall_clock():
    django_ojs.enqueue("a", heartbeat_timeout=5, visibility_timeout=600)
    job = lifecycle.fetch(["default"], worker_id="w")[0]
    Job.objects.filter(pk=job.pk).update(stalled_at=timezone.now() - timedelta(seconds=1))
    lifecycle.beat("w", active_job_ids=[job.id])
    assert lifecycle.rescue_expired() == 0


def test_rescue_expired__total_timeout_of_an_active_job_discards():
    django_ojs.enqueue(
        "a", total_timeout=4, timeout=3, visibility_timeout=600, retry={"max_attempts": 5}
    )
    job = lifecycle.fetch(["default"])[0]
    lifecycle.rescue_expired(now=later(5))
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.error["type"]) == ("discarded", "total_timeout")


def test_recover_dead_workers__jobs_of_a_silent_worker_are_requeued(settings):
    settings.OJS_WORKER_STALE_AFTER = 10
    django_ojs.enqueue("a")
    django_ojs.enqueue("a")
    lifecycle.register("dead", queues=["default"])
    lifecycle.register("alive", queues=["default"])
    dead_job = lifecycle.fetch(["default"], worker_id="dead")[0]
    alive_job = lifecycle.fetch(["default"], worker_id="alive")[0]
    Worker.objects.filter(id="dead").update(
        last_heartbeat_at=timezone.now() - timedelta(seconds=11)
    )
    assert lifecycle.recover_dead_workers() == 1
    assert Job.objects.get(pk=dead_job.pk).state == "available"
    assert Job.objects.get(pk=dead_job.pk).error["type"] == "worker_death"
    assert Job.objects.get(pk=alive_job.pk).state == "active"
    assert not Worker.objects.filter(id="dead").exists()
    # The dead worker's late ACK is refused: the job is no longer its.
    with pytest.raises(django_ojs.InvalidTransition):
        lifecycle.ack(dead_job.id, worker_id="dead")


def test_prune__respects_each_cut_off():
    old = timezone.now() - timedelta(days=400)
    JobFactory(completed=True, completed_at=old)
    JobFactory(cancelled=True, cancelled_at=old)
    plain = JobFactory(discarded=True, discarded_at=old)
    dead = JobFactory(discarded=True, discarded_at=old, dead_letter=True)
    recent = JobFactory(completed=True)
    Event.objects.create(type="job.enqueued", source="s", time=old)
    out = lifecycle.prune(
        completed_before=timezone.now() - timedelta(days=1),
        cancelled_before=timezone.now() - timedelta(days=1),
        discarded_before=timezone.now() - timedelta(days=1),
        events_before=timezone.now() - timedelta(days=1),
    )
    assert out == {
        "completed": 1,
        "discarded": 1,
        "dead_letter": 0,
        "cancelled": 1,
        "events": 1,
        "workflows": 0,
    }
    assert set(Job.objects.values_list("id", flat=True)) == {dead.id, recent.id}
    assert not Job.objects.filter(pk=plain.pk).exists()
    assert lifecycle.prune(dead_letter_before=timezone.now())["dead_letter"] == 1


def test_reaper_pass__moves_everything_due_and_reports_it(settings):
    settings.OJS_WORKER_STALE_AFTER = 10
    JobFactory(scheduled=True, scheduled_at=timezone.now() - timedelta(seconds=1))
    JobFactory(expired=True)
    JobFactory(
        stale_at=timezone.now() - timedelta(seconds=1),
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    WorkerFactory(id="gone", last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    JobFactory(active=True, worker_id="gone")
    result = reaper.run_once(prune=True)
    assert result.leader
    assert (result.promoted, result.expired, result.rescued, result.recovered) == (1, 1, 1, 1)
    assert set(result.pruned) == {
        "completed",
        "discarded",
        "dead_letter",
        "cancelled",
        "events",
        "workflows",
        "results",
        "idempotency_keys",
    }
    assert not Job.objects.filter(state="active").exists()


def test_prune__limit_deletes_at_most_that_many_of_each_kind_oldest_first():
    old = timezone.now() - timedelta(days=400)
    done = sorted((JobFactory(completed=True, completed_at=old) for _ in range(5)),
                  key=lambda j: j.pk)  # fmt: skip
    for _ in range(3):
        Event.objects.create(type="job.enqueued", source="s", time=old)
    cut = timezone.now() - timedelta(days=1)

    first = lifecycle.prune(completed_before=cut, events_before=cut, limit=2)

    assert (first["completed"], first["events"]) == (2, 2)
    assert list(Job.objects.order_by("pk").values_list("pk", flat=True)) == [j.pk for j in done[2:]]
    rest = lifecycle.prune(completed_before=cut, events_before=cut, limit=10)
    assert (rest["completed"], rest["events"]) == (3, 1)


def test_reaper__prunes_a_backlog_in_batches_of_short_transactions(settings, monkeypatch):
    from django_ojs import reaper

    monkeypatch.setattr(reaper, "PRUNE_BATCH", 2)
    settings.OJS_RETENTION = {"completed": 3600}
    old = timezone.now() - timedelta(days=2)
    for _ in range(5):
        JobFactory(completed=True, completed_at=old)
    kept = JobFactory(completed=True)
    transactions = []
    real = lifecycle.prune

    def counting(**kwargs):
        transactions.append(kwargs["limit"])
        return real(**kwargs)

    monkeypatch.setattr(lifecycle, "prune", counting)

    out = reaper.prune_expired()

    assert out["completed"] == 5
    assert transactions == [2, 2, 2]  # 2 + 2 + 1: the third found fewer than a batch
    assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
