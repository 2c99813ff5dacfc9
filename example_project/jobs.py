"""Job handlers of the example project, discovered by django-ojs at startup.

The ``test.*`` handlers are the standard set of ojs-conformance.md §5.4, so a conformance
run (or a curious reader) can watch every path with ``python manage.py ojs_worker``. The
``demo.*`` handlers show the handler API: plain args, a context, progress, asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from django.db import connection

import django_ojs
from django_ojs.context import JobCancelled, JobContext, JobError

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- conformance


@django_ojs.handler("test.echo")
def echo(*args: Any) -> list[Any]:
    """Return the arguments as the result (L0-004 expects the whole args array)."""
    return list(args)


@django_ojs.handler("test.workflow_step")
def workflow_step(ctx: JobContext, n: int) -> dict[str, Any]:
    """A workflow step: its number and the numbers of the upstream results it was given."""
    seen = [p.get("n") if isinstance(p, dict) else p for p in ctx.parent_results]
    return {"n": n, "seen": seen}


@django_ojs.handler("test.noop")
def noop(*args: Any) -> None:
    """Succeed at once with no result."""


def _seconds(args: tuple[Any, ...], default: float) -> float:
    # The suites send [{"duration_ms": N}]; the L4-002 example sends [5] (seconds).
    if args and isinstance(args[0], dict):
        if "duration_ms" in args[0]:
            return float(args[0]["duration_ms"]) / 1000
        if "duration" in args[0]:
            return float(args[0]["duration"])
    if args and isinstance(args[0], int | float) and not isinstance(args[0], bool):
        return float(args[0])
    return default


@django_ojs.handler("test.slow")
def slow(ctx: JobContext, *args: Any) -> dict[str, Any]:
    """Sleep for the given duration, then succeed. Stops early when cancelled."""
    seconds = _seconds(args, 1.0)
    if ctx.cancelled.wait(seconds):
        raise JobCancelled(ctx.cancel_reason or "cancelled")
    return {"slept_ms": round(seconds * 1000)}


@django_ojs.handler("test.rendezvous")
def rendezvous(ctx: JobContext, workers: int) -> dict[str, int]:
    """Wait (up to 120 s) until ``workers`` different workers have started one of these.

    A test that must see several workers share a queue starts with more of these than
    one worker has slots: that worker's slots all wait here, so another worker has to
    claim one, however fast or slow each of them starts.
    """
    from django_ojs.models import Job

    deadline = time.monotonic() + 120
    seen = 0
    while time.monotonic() < deadline and not ctx.cancelled.is_set():
        seen = (
            Job.objects.filter(type="test.rendezvous", state__in=("active", "completed"))
            .values("worker_id")
            .distinct()
            .count()
        )
        if seen >= workers:
            break
        time.sleep(0.02)
    return {"workers": seen}


@django_ojs.handler("test.trace")
def trace(*args: Any) -> dict[str, str | None]:
    """Report the W3C trace the handler runs in (the enqueuing request's trace)."""
    from django_ojs import tracing

    context = tracing.current()
    logger.info("running in a trace")
    return {"trace_id": context.trace_id if context else None}


@django_ojs.handler("test.timed")
def timed(*args: Any) -> dict[str, float]:
    """Sleep like ``test.slow`` and report when the handler ran (epoch seconds, this host)."""
    began = time.time()
    time.sleep(_seconds(args, 0.1))
    return {"began": began, "ended": time.time()}


@django_ojs.handler("test.fail_once")
def fail_once(ctx: JobContext, *args: Any) -> dict[str, int]:
    """Fail on attempt 1, succeed on attempt 2."""
    if ctx.attempt < 2:
        raise JobError(f"test.fail_once: failing attempt {ctx.attempt}", type="test.failure")
    return {"attempt": ctx.attempt}


@django_ojs.handler("test.fail_twice")
def fail_twice(ctx: JobContext, *args: Any) -> dict[str, int]:
    """Fail on attempts 1 and 2, succeed on attempt 3."""
    if ctx.attempt < 3:
        raise JobError(f"test.fail_twice: failing attempt {ctx.attempt}", type="test.failure")
    return {"attempt": ctx.attempt}


@django_ojs.handler("test.fail_always")
def fail_always(*args: Any) -> None:
    """Always fail with a retryable error."""
    raise JobError("test.fail_always: failing as asked", type="test.failure", retryable=True)


@django_ojs.handler("test.timeout")
def timeout(*args: Any) -> None:
    """Run longer than any configured timeout, ignoring the cancellation signal."""
    deadline = time.monotonic() + _seconds(args, 3600.0)
    while time.monotonic() < deadline:
        time.sleep(0.05)


@django_ojs.handler("test.panic")
def panic(*args: Any) -> None:
    """Crash the process running the handler (a worker crash in the thread pool)."""
    os._exit(70)


@django_ojs.handler("test.produce")
def produce(*args: Any) -> Any:
    """Return a configurable value: the first argument (L3-001 uses ["step1_output"])."""
    return args[0] if args else None


# --------------------------------------------------------------------------- poison


@django_ojs.handler("poison.result")
def poison_result(*args: Any) -> dict[str, str]:
    """Return a NUL, which no job store can hold: the job fails as ``result_not_storable``."""
    return {"text": "before\u0000after"}


@django_ojs.handler("poison.error")
def poison_error(*args: Any) -> None:
    """Raise with a NUL in the message: the error is stored with U+FFFD in its place."""
    raise ValueError("bad byte \u0000 in the input")


# --------------------------------------------------------------------------- demo


@django_ojs.handler("demo.add")
def add(a: float, b: float) -> float:
    """The smallest handler: args in, JSON result out."""
    return a + b


@django_ojs.handler("email.send")
def send_email(to: str, subject: str = "", body: str = "") -> dict[str, str]:
    """Pretend to send an email (logs it)."""
    logger.info("sending email to %s: %s", to, subject)
    return {"to": to, "status": "sent"}


@django_ojs.handler("demo.report")
def report(ctx: JobContext, rows: int = 100, delay_ms: int = 20) -> dict[str, int]:
    """A long job: reports progress, heartbeats, and stops cleanly when cancelled."""
    for done in range(1, rows + 1):
        ctx.raise_if_cancelled()
        time.sleep(delay_ms / 1000)
        if done % 10 == 0:
            ctx.progress(done / rows, f"{done} of {rows} rows")
    return {"rows": rows}


@django_ojs.handler("demo.sleep_async")
async def sleep_async(seconds: float = 1.0) -> dict[str, float]:
    """An ``async def`` handler: cancelled through asyncio at its timeout."""
    await asyncio.sleep(seconds)
    return {"slept": seconds}


# --------------------------------------------------------------------------- chaos test

#: Where ``chaos.record`` writes; the chaos test (tests/acceptance) creates and drops it.
CHAOS_TABLE = "ojs_chaos_start"


@django_ojs.handler("chaos.record")
def chaos_record(ctx: JobContext, duration_ms: int = 0) -> dict[str, int]:
    """Record this start (job id, attempt, process id), then sleep ``duration_ms``.

    The row commits at once (autocommit), so a start is recorded even when the worker is
    killed right after: the chaos test explains every second start of a job by a kill.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ojs_chaos_start (job_id, attempt, pid) VALUES (%s, %s, %s)",
            [ctx.job_id, ctx.attempt, os.getpid()],
        )
    if ctx.cancelled.wait(duration_ms / 1000):
        raise JobCancelled(ctx.cancel_reason or "cancelled")
    return {"pid": os.getpid()}


@django_ojs.handler("chaos.mark")
def chaos_mark(ctx: JobContext, path: str, duration_ms: int = 0) -> None:
    """Append this start (job id, attempt, process id) to the file ``path``, then sleep
    ``duration_ms``.

    Outside the database, so a start is recorded whatever happens to the connections (the
    PgBouncer test restarts the pooler under it, the failover test loses a server). One
    short ``O_APPEND`` write per start: lines from several processes never interleave.
    """
    _append(path, f"{ctx.job_id} {ctx.attempt} {os.getpid()}\n")
    if duration_ms:
        time.sleep(duration_ms / 1000)


@django_ojs.handler("chaos.cron_mark")
def chaos_cron_mark(ctx: JobContext, path: str) -> None:
    """Like ``chaos.mark``, with the cron slot first: ``slot job_id attempt pid`` (the
    failover test counts slots that ran twice)."""
    slot = ctx.meta.get("cron_scheduled_at", "-")
    _append(path, f"{slot} {ctx.job_id} {ctx.attempt} {os.getpid()}\n")


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
