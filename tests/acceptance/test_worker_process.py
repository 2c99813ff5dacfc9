"""``manage.py ojs_worker`` as operators run it: real processes, real signals, both databases.

Covers the acceptance list of the worker issue: draining by two workers with each job run
once, ``kill -9`` recovery, SIGTERM/SIGINT/SIGTSTP/SIGCONT, execution timeouts (soft then
hard, threads and processes), heartbeats against the visibility timeout, stall detection,
discards by enqueue TTL / total timeout / ``expires_at``, the pickup latency, and
outcomes the database cannot store (issue 9).

Written to hold on a loaded machine (``make test-under-load``): a worker is registered
(its children ready) before jobs whose timers matter are enqueued, conditions are polled
with generous deadlines, and no timing assertion depends on how fast a process starts.
"""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections import Counter
from datetime import timedelta

import pytest

import django_ojs
from django_ojs.models import Event, Job
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def job(pk) -> Job:
    return Job.objects.get(pk=pk)


def in_state(pk, *states):
    return lambda: job(pk).state in states


def events(pk, kind):
    return list(Event.objects.filter(job_id=pk, type=kind).order_by("seq"))


def test_two_workers_drain_1000_jobs_each_run_exactly_once(processes):
    # The first 11 jobs wait until both workers have started one: one worker (10 slots)
    # cannot run them all, so the other must claim work too, whichever starts first and
    # however slow the machine (no race against a clock).
    a = processes.worker("--concurrency", "10", OJS_WORKER_POLL_INTERVAL=0.05)
    b = processes.worker("--concurrency", "10", OJS_WORKER_POLL_INTERVAL=0.05)
    jobs = django_ojs.enqueue_many(
        [{"type": "test.rendezvous", "args": [2], "priority": 10} for _ in range(11)]
        + [
            {"type": "test.slow", "args": [{"duration_ms": 10}], "meta": {"n": i}}
            for i in range(989)
        ]
    )
    wait_for(lambda: Job.objects.filter(state="completed").count() == 1000, a, timeout=240)
    stored = Job.objects.all()
    assert all(j.attempt == 1 for j in stored)
    assert {j.result["slept_ms"] for j in stored if j.type == "test.slow"} == {10}
    assert {j.result["workers"] for j in stored if j.type == "test.rendezvous"} == {2}
    started = Counter(Event.objects.filter(type="job.started").values_list("job_id", flat=True))
    done = Counter(Event.objects.filter(type="job.completed").values_list("job_id", flat=True))
    assert set(started) == set(done) == {j.id for j in jobs}
    assert set(started.values()) == {1} and set(done.values()) == {1}
    by_worker = Counter(stored.values_list("worker_id", flat=True))
    assert set(by_worker) == {a.worker().id, b.worker().id}
    for process in (a, b):
        process.signal(signal.SIGTERM)
    assert a.wait(60) == 0 and b.wait(60) == 0


def test_an_unstorable_outcome_does_not_hold_up_the_others(processes):
    # Issue 9: one result (or error) the database cannot store used to block the batch
    # writer for ~35 s, lose the batch's other acks (their jobs ran again) and end as a
    # visibility_timeout. The reservation here outlives the test, so only prompt writes
    # can complete the jobs, and each must have run once.
    worker = processes.worker("--concurrency", "10", OJS_VISIBILITY_TIMEOUT=120)
    bad_result = django_ojs.enqueue("poison.result", retry={"max_attempts": 3})
    bad_error = django_ojs.enqueue("poison.error", retry={"max_attempts": 1})
    good = django_ojs.enqueue_many([{"type": "test.echo", "args": [i]} for i in range(200)])
    pks = [j.pk for j in good]
    wait_for(lambda: Job.objects.filter(pk__in=pks, state="completed").count() == 200, worker)
    stored = Job.objects.filter(pk__in=pks)
    assert all(j.attempt == 1 and j.result == [j.args[0]] for j in stored)
    started = Counter(Event.objects.filter(type="job.started").values_list("job_id", flat=True))
    assert all(started[pk] == 1 for pk in pks)
    wait_for(in_state(bad_result.pk, "discarded"), worker, timeout=60)
    wait_for(in_state(bad_error.pk, "discarded"), worker, timeout=60)
    error = job(bad_result.pk).error
    assert error["type"] == "result_not_storable" and error["retryable"] is False
    assert "NUL" in error["message"] and job(bad_result.pk).attempt == 1
    error = job(bad_error.pk).error
    assert error["type"] == "ValueError" and error["message"] == "bad byte \ufffd in the input"
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0


def test_kill_9_mid_job__the_job_is_recovered_by_another_worker(processes):
    victim = processes.worker("--concurrency", "4", "--no-reaper")
    jobs = django_ojs.enqueue_many(
        [{"type": "test.slow", "args": [{"duration_ms": 1500}]} for _ in range(8)]
    )
    wait_for(lambda: Job.objects.filter(state="active").count() == 4, victim, timeout=60)
    # Frozen first, so that the jobs it holds cannot change (however slow this test is)
    # between reading them and the kill.
    victim.signal(signal.SIGSTOP)
    held = set(Job.objects.filter(state="active").values_list("id", flat=True))
    assert held
    victim.popen.kill()  # SIGKILL: no clean-up at all
    victim.wait(10)
    # Stale after 3 s: the victim's last heartbeat is that old long before the deadline
    # below, and the rescuer's own heartbeats (every 0.3 s) stay far inside it.
    rescuer = processes.worker("--concurrency", "4", OJS_WORKER_STALE_AFTER=3)
    wait_for(lambda: Job.objects.filter(state="completed").count() == 8, rescuer, timeout=120)
    for j in Job.objects.filter(id__in=[j.id for j in jobs]):
        assert len(events(j.id, "job.completed")) == 1
        if j.id in held:
            assert j.attempt == 2 and j.errors[0]["type"] == "worker_death"
            assert j.worker_id == rescuer.worker().id
        else:
            assert j.attempt == 1 and j.errors == []
    assert Event.objects.filter(type="worker.stopped", data__reason="heartbeat_timeout").exists()


def test_sigterm_drains_then_fails_leftovers_as_shutdown_and_exits_0(processes):
    # The short job ends 2 s into the 5 s grace period, however late the signal comes
    # (within its 2 s run): seconds of margin either way on a loaded machine.
    worker = processes.worker("--shutdown-grace-period", "5")
    short = django_ojs.enqueue("test.slow", [{"duration_ms": 2000}])
    stubborn = django_ojs.enqueue("test.timeout", [60], retry={"max_attempts": 3})
    wait_for(lambda: job(short.pk).state == job(stubborn.pk).state == "active", worker, 60)
    started = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert 4.9 <= time.monotonic() - started < 60
    assert job(short.pk).state == "completed"
    left = job(stubborn.pk)
    assert left.state == "available" and left.error["type"] == "shutdown"
    assert left.error["retryable"] is True
    assert not worker.worker()  # deregistered
    assert "draining: 2 job(s) running" in worker.output()


def test_sigint_is_graceful_and_a_second_one_exits_at_once(processes):
    worker = processes.worker("--shutdown-grace-period", "30")
    stubborn = django_ojs.enqueue("test.timeout", [60])
    wait_for(in_state(stubborn.pk, "active"), worker, timeout=60)
    worker.signal(signal.SIGINT)
    wait_for(lambda: "is terminating" in worker.output(), worker, timeout=60)
    time.sleep(0.3)
    assert worker.returncode is None  # still draining
    worker.signal(signal.SIGINT)
    assert worker.wait(30) == 130
    assert job(stubborn.pk).state == "active"  # left for the reaper to recover


def test_sigtstp_quiets_and_sigcont_resumes(processes):
    worker = processes.worker()
    worker.signal(signal.SIGTSTP)
    wait_for(lambda: worker.worker().state == "quiet", worker, timeout=60)
    waiting = django_ojs.enqueue("test.echo", ["later"])
    time.sleep(1.0)
    assert job(waiting.pk).state == "available"  # a quiet worker fetches nothing
    worker.signal(signal.SIGCONT)
    wait_for(in_state(waiting.pk, "completed"), worker, timeout=60)
    wait_for(lambda: worker.worker().state == "running", worker, timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_execution_timeout_soft_then_hard(processes, pool):
    worker = processes.worker("--pool", pool, "--concurrency", "2")
    # Cooperative: stops at the cancellation signal, long before the grace period ends.
    soft = django_ojs.enqueue(
        "test.slow", [{"duration_ms": 20000}], timeout=1, grace_period=20, retry={"max_attempts": 1}
    )
    # Stubborn: ignores the signal and is terminated at timeout + grace period.
    hard = django_ojs.enqueue(
        "test.timeout", [60], timeout=1, grace_period=1, retry={"max_attempts": 1}
    )
    wait_for(lambda: job(soft.pk).state == job(hard.pk).state == "discarded", worker, timeout=90)
    soft_error, hard_error = job(soft.pk).error, job(hard.pk).error
    for error in (soft_error, hard_error):
        assert error["type"] == "timeout" and error["timeout_kind"] == "execution"
        assert error["limit_seconds"] == 1
    # Cancelled at its timeout, not terminated at the end of its 20 s grace period.
    assert 1 <= soft_error["elapsed_seconds"] < 15 and "grace" not in soft_error["message"]
    # The worker terminates it, or the reaper gets there first (same deadline).
    assert hard_error["elapsed_seconds"] >= 2 and "grace period" in hard_error["message"]
    assert events(soft.pk, "job.timeout") and events(hard.pk, "job.timeout")
    # Both slots are usable again (a killed child process is replaced).
    after = [django_ojs.enqueue("test.echo", [i]) for i in range(2)]
    for j in after:
        wait_for(in_state(j.pk, "completed"), worker, timeout=90)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0


def test_process_pool_survives_a_crashing_handler(processes):
    worker = processes.worker("--pool", "processes", "--concurrency", "1")
    crash = django_ojs.enqueue("test.panic", retry={"max_attempts": 1})
    wait_for(in_state(crash.pk, "discarded"), worker, timeout=90)
    assert job(crash.pk).error["type"] == "crash"
    echo = django_ojs.enqueue("test.echo", ["still here"])
    wait_for(in_state(echo.pk, "completed"), worker, timeout=90)
    assert job(echo.pk).result == ["still here"]


def test_heartbeats_keep_a_long_job_alive_past_its_visibility_timeout(processes):
    worker = processes.worker()
    # Heartbeats every 0.3 s against a 3 s reservation: ten beats may be late before it
    # lapses; the job runs 2.5 reservations long.
    long = django_ojs.enqueue("test.slow", [{"duration_ms": 7500}], visibility_timeout=3)
    wait_for(in_state(long.pk, "completed"), worker, timeout=90)
    stored = job(long.pk)
    assert stored.attempt == 1 and stored.errors == []
    # Past the first reservation: only heartbeats can have kept it.
    assert (stored.completed_at - stored.started_at).total_seconds() > 3 * 2
    assert len(events(long.pk, "job.heartbeat")) >= 5


def test_a_stalled_job_is_detected(processes):
    worker = processes.worker("--no-reaper")
    reaper = processes.reaper()
    stalled = django_ojs.enqueue(
        "test.slow", [{"duration_ms": 10000}], heartbeat_timeout=1, retry={"max_attempts": 1}
    )
    wait_for(in_state(stalled.pk, "active"), worker, timeout=60)
    worker.signal(signal.SIGSTOP)  # frozen: no heartbeats, the reservation is still valid
    try:
        wait_for(in_state(stalled.pk, "discarded"), reaper, timeout=60)
    finally:
        worker.signal(signal.SIGCONT)
    error = job(stalled.pk).error
    assert error["type"] == "stalled" and error["timeout_kind"] == "stalled"
    assert error["limit_seconds"] == 1 and error["elapsed_seconds"] >= 1
    assert events(stalled.pk, "job.stalled")


def test_enqueue_ttl_total_timeout_and_expires_at_discard_with_their_error_types(processes):
    # Registered first: the jobs that must run start at once, not when a loaded machine
    # has finished starting the worker (their total timeouts count from the enqueue).
    worker = processes.worker()
    nobody = {"queue": "unserved"}  # no worker fetches this queue: the jobs only wait
    ttl = django_ojs.enqueue("test.echo", enqueue_ttl=1, **nobody)
    expiring = django_ojs.enqueue("test.echo", expires_at=timedelta(seconds=1), **nobody)
    waiting_total = django_ojs.enqueue("test.echo", total_timeout=1, timeout=1, **nobody)
    # Ignores its cancellation signal, with a 60 s grace period: only its 5 s total
    # timeout (the reaper) can end it. The worker claims it long before that.
    running_total = django_ojs.enqueue(
        "test.timeout", [120], total_timeout=5, timeout=5, grace_period=60
    )
    # Timeouts §9.1: no retry that could not finish inside the total timeout.
    no_retry = django_ojs.enqueue(
        "test.fail_always", total_timeout=4, timeout=1,
        retry={"max_attempts": 10, "initial_interval": "PT1S", "jitter": False},
    )  # fmt: skip
    pks = [ttl.pk, expiring.pk, waiting_total.pk, running_total.pk, no_retry.pk]
    wait_for(lambda: all(job(pk).state == "discarded" for pk in pks), worker, timeout=90)
    assert job(ttl.pk).error["type"] == "enqueue_ttl_expired"
    assert job(ttl.pk).error["timeout_kind"] == "enqueue_ttl"
    assert events(ttl.pk, "job.ttl_expired")
    assert job(expiring.pk).error["type"] == "expired" and events(expiring.pk, "job.expired")
    for pk in (waiting_total.pk, running_total.pk):
        assert job(pk).error["type"] == "total_timeout"
        assert job(pk).error["timeout_kind"] == "total" and events(pk, "job.total_timeout")
    assert job(running_total.pk).attempt == 1
    stopped = job(no_retry.pk)
    assert 1 <= stopped.attempt < 4
    assert events(no_retry.pk, "job.discarded")[-1].data["reason"] == "total_timeout"


@pytest.mark.postgresql
def test_pickup_of_an_idle_worker_is_set_by_notifications_on_postgresql(processes):
    # Polling every 5 s would give a median pickup of about 2.5 s; a LISTEN wake-up takes
    # milliseconds (bench/pickup_latency.py measures it). The bound tells them apart with
    # a margin a loaded machine cannot use up.
    worker = processes.worker(OJS_WORKER_POLL_INTERVAL=5)
    warm = django_ojs.enqueue("test.noop")
    wait_for(in_state(warm.pk, "completed"), worker, timeout=60)
    latencies = []
    for _ in range(20):
        time.sleep(0.05)  # idle: waiting in LISTEN, not polling
        j = django_ojs.enqueue("test.noop")
        wait_for(in_state(j.pk, "completed"), worker, timeout=60)
        stored = job(j.pk)
        assert stored.attempt == 1  # picked up once, by the notification's fetch
        latencies.append((stored.started_at - stored.enqueued_at).total_seconds() * 1000)
    # Below 1 s: less than half of what polling every 5 s gives (median ≈ 2.5 s), with
    # room for a shared CI machine.
    assert statistics.median(latencies) < 1000, latencies
    assert worker.returncode is None  # the worker is still serving


def test_the_trace_of_the_enqueuing_request_reaches_the_worker(processes):
    """Middleware §8.1.5: a traceparent sent with the push is the trace the handler runs in
    (and the one its log lines name), in a real ``ojs_worker`` process."""
    from django.test import RequestFactory

    from django_ojs import tracing

    trace_id = "0af7651916cd43dd8448eb211c80319c"
    worker = processes.worker()

    def view(request):
        from django.http import JsonResponse

        return JsonResponse({"id": str(django_ojs.enqueue("test.trace").id)})

    request = RequestFactory().get("/", HTTP_TRACEPARENT=f"00-{trace_id}-b7ad6b7169203331-01")
    job_id = json.loads(tracing.TraceContextRequestMiddleware(view)(request).content)["id"]
    wait_for(in_state(job_id, "completed"), worker, timeout=60)
    assert job(job_id).result == {"trace_id": trace_id}


def test_django_tasks_run_in_a_real_worker_with_retries(processes):
    """``@task`` functions of installed apps run in ``ojs_worker`` (django_ojs.tasks)."""
    from django_ojs.tasks import tasks_api
    from example_project import tasks as example
    from tests.taskapp import tasks

    worker = processes.worker()
    welcome = example.send_welcome_email.enqueue(7, template="hello")
    flaky = example.flaky_sync.enqueue(3)
    added = tasks.add.enqueue(40, b=2)
    for result in (welcome, flaky, added):
        wait_for(in_state(result.id, "completed"), worker, timeout=60)
    assert job(welcome.id).result == {"user_id": 7, "template": "hello", "sent": True}
    retried = job(flaky.id)
    assert retried.result == {"n": 3, "attempt": 2} and retried.attempt == 2
    assert retried.errors[0]["type"] == "ConnectionError"
    got = tasks.add.get_result(added.id)
    assert got.status == tasks_api.Status.SUCCESSFUL and got.return_value == 42
    assert got.worker_ids == [worker.worker().id]


def test_maintenance_mode_holds_jobs_until_switched_off_by_the_command(processes):
    # Admin API §12.1: a real worker claims nothing while maintenance is on, and picks the
    # job up once another process (the management command) switches it off: the switch is
    # read from the database, within OJS_MAINTENANCE_CACHE_SECONDS.
    from django_ojs import lifecycle
    from django_ojs.models import Worker

    lifecycle.set_maintenance(True, reason="acceptance test")
    worker = processes.worker("--concurrency", "2")
    held = django_ojs.enqueue("test.echo", ["held"])
    registered = worker.worker()
    assert registered is not None

    # Its fetcher polls every 0.05 s; three heartbeats (0.3 s apart) after the enqueue it
    # has looked for work many times. (A slow machine can only make this pass vacuously.)
    def beat_after(seen):
        return lambda: Worker.objects.get(pk=registered.pk).last_heartbeat_at > seen

    for _ in range(3):
        wait_for(beat_after(Worker.objects.get(pk=registered.pk).last_heartbeat_at), worker, 60)
    assert job(held.pk).state == "available"

    switch = processes.start(["ojs_maintenance", "off"], {})
    assert switch.wait(120) == 0, switch.output()
    assert "Maintenance mode is off." in switch.output()

    wait_for(in_state(held.pk, "completed"), worker, timeout=120)
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
