"""The in-process worker loop on a real database, run in a thread of the test process.

Signals and real processes are covered by ``tests/acceptance``; here each test registers
its own handlers and drives one :class:`~django_ojs.worker.Worker`. Timers leave seconds
of margin, and waits are polls with deadlines, so the tests hold on a loaded machine.
"""

from __future__ import annotations

import threading
import time

import pytest

import django_ojs
from django_ojs import lifecycle
from django_ojs.context import JobCancelled, JobContext, JobError
from django_ojs.models import Event, Job, Worker
from django_ojs.registry import Registry
from django_ojs.worker import Worker as OJSWorker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def wait_until(wait_until):
    """The shared polling helper with a deadline a loaded machine cannot reach."""

    def wait(predicate, timeout: float = 60.0, interval: float = 0.02):
        return wait_until(predicate, timeout=timeout, interval=interval)

    return wait


@pytest.fixture
def handlers() -> Registry:
    return Registry()


@pytest.fixture
def start_worker(handlers):
    started: list[OJSWorker] = []

    def start(**options) -> OJSWorker:
        config = {
            "queues": ["default"],
            "concurrency": 4,
            "poll_interval": 0.05,
            "heartbeat_interval": 0.2,
            "run_reaper": False,
            "shutdown_grace_period": 2.0,
            "handlers": handlers,
            **options,
        }
        worker = OJSWorker(**config)
        worker.status = None

        def run() -> None:
            worker.status = worker.run()

        worker.thread = threading.Thread(target=run, daemon=True)
        worker.thread.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.terminate()
        worker.terminate()  # do not wait for handlers still running
        worker.thread.join(60)
        assert not worker.thread.is_alive()


def job(pk) -> Job:
    return Job.objects.get(pk=pk)


def kinds(pk) -> list[str]:
    return list(Event.objects.filter(job_id=pk).order_by("seq").values_list("type", flat=True))


def state_is(pk, *states):
    return lambda: job(pk).state in states


def test_worker__runs_handlers_and_stores_results(handlers, start_worker, wait_until):
    handlers.register("echo.args", lambda *args: list(args))
    handlers.register("demo.add", lambda a, b: a + b)
    handlers.register("demo.none", lambda: None)
    echoes = [django_ojs.enqueue("echo.args", ["hello", i]) for i in range(20)]
    add = django_ojs.enqueue("demo.add", [2, 3])
    none = django_ojs.enqueue("demo.none")
    worker = start_worker()
    wait_until(lambda: Job.objects.filter(state="completed").count() == 22)
    for i, e in enumerate(echoes):
        stored = job(e.pk)
        assert stored.result == ["hello", i] and stored.attempt == 1
        assert stored.worker_id == worker.worker_id and stored.visible_until is None
    assert job(add.pk).result == 5
    assert job(none.pk).result is None
    # A heartbeat may come in between on a slow machine; it is not part of the story.
    story = [kind for kind in kinds(add.pk) if kind != "job.heartbeat"]
    assert story == ["job.enqueued", "job.started", "job.completed"]
    completed = Event.objects.get(job_id=add.pk, type="job.completed").data
    assert completed["result"] == 5 and completed["attempt"] == 1 and "duration_ms" in completed
    assert Worker.objects.filter(id=worker.worker_id).exists()


def test_worker__exception_fails_the_attempt_with_type_message_and_backtrace(
    handlers, start_worker, wait_until
):
    def broken(n):
        raise ValueError(f"bad input {n}")

    handlers.register("demo.broken", broken)
    j = django_ojs.enqueue("demo.broken", [7], retry={"max_attempts": 1})
    start_worker()
    wait_until(state_is(j.pk, "discarded"))
    error = job(j.pk).error
    assert error["type"] == "ValueError" and error["message"] == "bad input 7"
    assert error["code"] == "handler_error" and error["attempt"] == 1
    assert any("raise ValueError" in line for line in error["backtrace"])
    assert kinds(j.pk)[-2:] == ["job.failed", "job.discarded"]


def test_worker__job_without_handler_is_discarded_at_once(start_worker, wait_until):
    j = django_ojs.enqueue("nobody.handles", retry={"max_attempts": 5})
    start_worker()
    wait_until(state_is(j.pk, "discarded"))
    stored = job(j.pk)
    assert stored.attempt == 1
    assert stored.error["type"] == "handler_not_found" and stored.error["retryable"] is False


def test_worker__failed_attempt_is_retried_with_the_attempt_number(
    handlers, start_worker, wait_until
):
    def fail_once(ctx, *args):
        if ctx.attempt < 2:
            raise JobError("first attempt fails", type="test.failure")
        return {"attempt": ctx.attempt}

    handlers.register("demo.fail_once", fail_once)
    j = django_ojs.enqueue(
        "demo.fail_once", retry={"max_attempts": 3, "initial_interval": "PT0.2S", "jitter": False}
    )
    start_worker()
    wait_until(state_is(j.pk, "completed"))
    stored = job(j.pk)
    assert stored.result == {"attempt": 2} and stored.attempt == 2
    assert [e["type"] for e in stored.errors] == ["test.failure"]
    assert "job.retrying" in kinds(j.pk)


def test_worker__non_retryable_job_error_discards(handlers, start_worker, wait_until):
    def expired():
        raise JobError("token expired", type="auth.expired", retryable=False)

    handlers.register("demo.auth", expired)
    j = django_ojs.enqueue("demo.auth", retry={"max_attempts": 5})
    start_worker()
    wait_until(state_is(j.pk, "discarded"))
    assert job(j.pk).error["type"] == "auth.expired" and job(j.pk).attempt == 1


def test_worker__non_json_result_fails_the_attempt(handlers, start_worker, wait_until):
    handlers.register("demo.set", lambda: {1, 2})
    j = django_ojs.enqueue("demo.set", retry={"max_attempts": 3})
    start_worker()
    wait_until(state_is(j.pk, "discarded"))
    assert job(j.pk).error["type"] == "invalid_result"


def test_worker__async_handler(handlers, start_worker, wait_until):
    import asyncio

    async def pause(seconds):
        await asyncio.sleep(seconds)
        return {"slept": seconds}

    handlers.register("demo.async", pause)
    j = django_ojs.enqueue("demo.async", [0.05])
    start_worker()
    wait_until(state_is(j.pk, "completed"))
    assert job(j.pk).result == {"slept": 0.05}


def test_worker__context_sees_the_job_and_reports_progress_and_heartbeats(
    handlers, start_worker, wait_until
):
    seen = {}

    def report(ctx: JobContext, rows):
        seen.update(attempt=ctx.attempt, job_id=ctx.job_id, meta=ctx.meta, type=ctx.type)
        ctx.progress(0.5, "half way")
        time.sleep(0.3)  # the next handler heartbeat is not throttled away
        assert ctx.heartbeat() is True
        ctx.progress(100, "done", {"rows": rows})
        return rows

    handlers.register("demo.report", report)
    j = django_ojs.enqueue("demo.report", [10], meta={"trace_id": "t-1"})
    start_worker(heartbeat_interval=60)
    wait_until(state_is(j.pk, "completed"))
    assert seen == {"attempt": 1, "job_id": str(j.pk), "meta": {"trace_id": "t-1"},
                    "type": "demo.report"}  # fmt: skip
    progress = [
        e.data for e in Event.objects.filter(job_id=j.pk, type="job.progress").order_by("seq")
    ]
    assert [p["progress_percent"] for p in progress] == [50.0, 100.0]
    assert progress[0]["progress_message"] == "half way" and progress[1]["data"] == {"rows": 10}
    assert progress[0]["trace_id"] == "t-1"
    assert "job.heartbeat" in kinds(j.pk)


def test_worker__cancelling_a_running_job_signals_its_handler(handlers, start_worker, wait_until):
    stopped = threading.Event()

    def wait_for_cancel(ctx: JobContext):
        if ctx.cancelled.wait(60):
            stopped.set()
            raise JobCancelled("stopping")
        return "not cancelled"

    handlers.register("demo.wait", wait_for_cancel)
    j = django_ojs.enqueue("demo.wait")
    worker = start_worker(heartbeat_interval=0.1)
    wait_until(state_is(j.pk, "active"))
    lifecycle.cancel(j.pk)
    wait_until(stopped.is_set)
    wait_until(lambda: not worker.running and not worker.pending)
    stored = job(j.pk)
    assert stored.state == "cancelled" and stored.result is None and stored.errors == []


def test_worker__execution_timeout_signals_then_fails_with_timeout_error(
    handlers, start_worker, wait_until
):
    def cooperative(ctx: JobContext):
        ctx.cancelled.wait(30)
        ctx.raise_if_cancelled()

    handlers.register("demo.cooperative", cooperative)
    j = django_ojs.enqueue(
        "demo.cooperative", timeout=0.5, grace_period=30, retry={"max_attempts": 1}
    )
    start_worker()
    wait_until(state_is(j.pk, "discarded"))
    error = job(j.pk).error
    assert error["type"] == "timeout" and error["code"] == "timeout"
    assert error["timeout_kind"] == "execution" and error["limit_seconds"] == 0.5
    assert 0.5 <= error["elapsed_seconds"] < 15  # stopped at the signal, not after the grace
    assert "job.timeout" in kinds(j.pk)


def test_worker__hard_timeout_abandons_the_handler_and_ignores_its_late_result(
    handlers, start_worker, wait_until
):
    release = threading.Event()
    returned = threading.Event()

    def stubborn():
        release.wait(30)  # ignores the cancellation signal
        returned.set()
        return "too late"

    handlers.register("demo.stubborn", stubborn)
    handlers.register("demo.quick", lambda: "quick")
    j = django_ojs.enqueue("demo.stubborn", timeout=0.3, grace_period=0.3,
                           retry={"max_attempts": 1})  # fmt: skip
    worker = start_worker(concurrency=1)
    wait_until(state_is(j.pk, "discarded"))
    error = job(j.pk).error
    assert error["type"] == "timeout" and error["elapsed_seconds"] >= 0.6
    assert "terminated" in error["message"]
    # The slot is free again although the abandoned handler still runs.
    quick = django_ojs.enqueue("demo.quick")
    wait_until(state_is(quick.pk, "completed"))
    release.set()
    wait_until(returned.is_set)
    time.sleep(0.2)
    stored = job(j.pk)
    assert stored.state == "discarded" and stored.result is None
    assert worker.completer.ignored == 0  # dropped before it reached the database


def test_worker__concurrency_is_never_exceeded(handlers, start_worker, wait_until):
    lock = threading.Lock()
    running = {"now": 0, "max": 0}

    def slow():
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
        time.sleep(0.1)
        with lock:
            running["now"] -= 1

    handlers.register("demo.slow", slow)
    for _ in range(12):
        django_ojs.enqueue("demo.slow")
    start_worker(concurrency=3)
    wait_until(lambda: Job.objects.filter(state="completed").count() == 12)
    assert running["max"] == 3


def test_worker__quiet_and_terminate_directives_from_heartbeat_replies(
    handlers, start_worker, wait_until
):
    handlers.register("demo.noop", lambda: None)
    worker = start_worker(heartbeat_interval=0.1)
    wait_until(lambda: Worker.objects.filter(id=worker.worker_id).exists())
    lifecycle.set_directive(worker.worker_id, "quiet")
    wait_until(lambda: worker.state == "quiet")
    wait_until(lambda: Worker.objects.get(id=worker.worker_id).state == "quiet")
    j = django_ojs.enqueue("demo.noop")
    time.sleep(0.5)
    assert job(j.pk).state == "available"  # a quiet worker does not fetch
    lifecycle.set_directive(worker.worker_id, "running")
    wait_until(state_is(j.pk, "completed"))
    lifecycle.set_directive(worker.worker_id, "terminate")
    worker.thread.join(60)
    assert worker.status == 0
    assert not Worker.objects.filter(id=worker.worker_id).exists()  # deregistered
    assert Event.objects.filter(type="worker.stopped", subject=worker.worker_id).exists()


def test_worker__shutdown_drains_then_fails_leftovers_as_shutdown(
    handlers, start_worker, wait_until
):
    release = threading.Event()
    handlers.register("demo.short", lambda: time.sleep(0.5) or "done")
    handlers.register("demo.long", lambda: release.wait(60) and "late")
    short = django_ojs.enqueue("demo.short")
    long = django_ojs.enqueue("demo.long", retry={"max_attempts": 3})
    # The short job ends 0.5 s into a 3 s grace period: seconds of margin when loaded.
    worker = start_worker(shutdown_grace_period=3.0)
    wait_until(lambda: job(short.pk).state == "active" and job(long.pk).state == "active")
    started = time.monotonic()
    worker.terminate()
    worker.thread.join(60)
    assert worker.status == 0 and 2.9 <= time.monotonic() - started < 30
    release.set()
    assert job(short.pk).state == "completed"  # drained within the grace period
    stored = job(long.pk)
    assert stored.state == "available" and stored.attempt == 1  # back in the queue at once
    assert stored.error["type"] == "shutdown" and stored.error["retryable"] is True


def test_worker__heartbeats_keep_a_long_job_past_its_visibility_timeout(
    handlers, start_worker, wait_until, settings
):
    settings.OJS_REAPER_INTERVAL = 0.1
    # Heartbeats every 0.2 s against a 2 s reservation (ten may be late); the job runs
    # for two and a half reservations.
    handlers.register("demo.long", lambda: time.sleep(5.0) or "done")
    j = django_ojs.enqueue("demo.long", visibility_timeout=2)
    start_worker(heartbeat_interval=0.2, run_reaper=True)
    wait_until(state_is(j.pk, "completed"))
    stored = job(j.pk)
    assert stored.attempt == 1 and stored.errors == []
    assert (stored.completed_at - stored.started_at).total_seconds() > 2 * 2
    assert kinds(j.pk).count("job.heartbeat") >= 3


def test_worker__without_heartbeats_the_reaper_takes_the_job_back(
    handlers, start_worker, wait_until, settings
):
    """The control experiment for the test above: the reservation lapses when not extended."""
    settings.OJS_REAPER_INTERVAL = 0.1
    release = threading.Event()
    # Runs until released: the reservation lapsing is the only way the job can end.
    handlers.register("demo.long", lambda: release.wait(60) and "done")
    j = django_ojs.enqueue("demo.long", visibility_timeout=0.5, retry={"max_attempts": 1})
    start_worker(heartbeat_interval=30, run_reaper=True)
    try:
        wait_until(state_is(j.pk, "discarded"))
    finally:
        release.set()
    assert job(j.pk).error["type"] == "visibility_timeout"
