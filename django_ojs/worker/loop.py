"""The in-process worker: register, fetch, run handlers, record outcomes, heartbeat, stop.

Every database change is a ``lifecycle`` call (``register``, ``fetch``, ``ack_many``,
``fail_many``, ``beat``, ``deregister``); this module schedules them. Threads: the main
loop fetches, a supervisor heartbeats and enforces execution timeouts, a completer
writes outcomes in batches, the pool runs handlers, and optionally the reaper runs too.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import connections

from django_ojs import lifecycle, reaper
from django_ojs.conf import settings
from django_ojs.context import JobContext
from django_ojs.drivers import get_driver
from django_ojs.lifecycle.store import db
from django_ojs.models import Job
from django_ojs.policy import Durations, configured, effective, ms_to_seconds
from django_ojs.registry import Registry, registry
from django_ojs.worker import execution
from django_ojs.worker.attempt import Attempt
from django_ojs.worker.completion import Completer
from django_ojs.worker.execution import Outcome
from django_ojs.worker.pool import ProcessPool, ThreadPool

logger = logging.getLogger("django_ojs.worker")

RUNNING, QUIET, TERMINATE = "running", "quiet", "terminate"
POOLS = ("threads", "processes")
#: How often the supervisor looks at deadlines (seconds).
TICK = 0.05
#: Handler-initiated heartbeats closer together than this share one BEAT.
MIN_HANDLER_BEAT_INTERVAL = 0.25
#: The job fields a fetch loads; the full envelope is read only if a handler asks for it.
FETCH_FIELDS = (
    "type", "queue", "args", "meta", "state", "attempt", "priority", "timeout_ms",
    "grace_period_ms", "started_at", "worker_id",
)  # fmt: skip
#: A busy worker waits up to this long (seconds) for a quarter of its slots to be free
#: before it fetches, rather than fetching one job per returning handler.
BATCH_WAIT = 0.005
#: Allocations between young-generation collections in a worker process (Python: 700).
GC_THRESHOLD = 20_000
#: Exit status after a second SIGINT (128 + SIGINT, as a shell reports it).
FORCED_EXIT = 130


def load_envelope(job_id: Any, using: str) -> dict[str, Any]:
    """The job's OJS envelope, read when a handler first looks at ``ctx.job``."""
    return Job.objects.using(using).get(pk=job_id).to_wire()


def default_worker_id() -> str:
    return f"worker-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """One ``ojs_worker`` process. Construct it, then call :meth:`run` (blocks).

    Parameters
    ----------
    queues:
        Queue names, most important first (default ``OJS_WORKER_QUEUES``).
    concurrency:
        Handlers running at once (default ``OJS_WORKER_CONCURRENCY``).
    pool:
        ``"threads"`` or ``"processes"`` (default ``OJS_WORKER_POOL``).
    shutdown_grace_period:
        Seconds to let running handlers finish after SIGTERM (``OJS_SHUTDOWN_GRACE_PERIOD``).
    run_reaper:
        Also run the reaper loop in this process (``OJS_WORKER_RUN_REAPER``).
    """

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        pool: str | None = None,
        poll_interval: float | None = None,
        shutdown_grace_period: float | None = None,
        heartbeat_interval: float | None = None,
        run_reaper: bool | None = None,
        worker_id: str | None = None,
        labels: Sequence[str] = (),
        handlers: Registry | None = None,
        using: str | None = None,
    ):
        self.queues = list(queues or settings.WORKER_QUEUES)
        self.concurrency = concurrency if concurrency is not None else settings.WORKER_CONCURRENCY
        self.pool_kind = pool or settings.WORKER_POOL
        if self.pool_kind not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, not {self.pool_kind!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.poll_interval = (
            poll_interval if poll_interval is not None else settings.WORKER_POLL_INTERVAL
        )
        self.shutdown_grace_period = (
            shutdown_grace_period
            if shutdown_grace_period is not None
            else settings.SHUTDOWN_GRACE_PERIOD
        )
        self.heartbeat_interval = (
            heartbeat_interval
            if heartbeat_interval is not None
            else settings.WORKER_HEARTBEAT_INTERVAL
        )
        self.run_reaper = settings.WORKER_RUN_REAPER if run_reaper is None else run_reaper
        self.worker_id = worker_id or default_worker_id()
        self.labels = list(labels)
        self.handlers = handlers or registry
        self.using = db(using)

        self._min_batch = max(1, self.concurrency // 4)
        self.state = RUNNING
        self._quiet_by_directive = False
        self._force = False
        self._interrupts = 0
        self._lock = threading.Lock()
        self._beat_lock = threading.Lock()
        self._last_beat = 0.0
        self.running: dict[Any, Attempt] = {}
        self.pending: dict[Any, int] = {}
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.listener: Any = None
        self.completer = Completer(self.worker_id, using=self.using, on_written=self._written)
        self.pool: ThreadPool | ProcessPool
        if self.pool_kind == "processes":
            self.pool = ProcessPool(
                self.concurrency,
                self._finish,
                on_beat=self._child_beat,
                on_progress=self._progress,
                using=self.using,
            )
        else:
            self.pool = ThreadPool(self.concurrency, self._finish)

    # ------------------------------------------------------------------ state changes
    # Called from signal handlers and heartbeat replies: set flags, wake the loop.

    def quiet(self, *, by_directive: bool = False) -> None:
        """Stop fetching; running handlers carry on (worker protocol §9.3)."""
        if self.state == RUNNING:
            self.state = QUIET
            self._quiet_by_directive = by_directive
            logger.info("worker %s is quiet: no new jobs", self.worker_id)
            self._wake()

    def resume(self) -> None:
        """Fetch again after quiet; ignored once terminating (worker protocol §9.4)."""
        if self.state == QUIET:
            self.state = RUNNING
            self._quiet_by_directive = False
            logger.info("worker %s is running again", self.worker_id)
            self._wake()

    def terminate(self) -> None:
        """Begin the graceful shutdown; a second call stops waiting for handlers."""
        if self.state == TERMINATE:
            if not self._force:
                logger.warning("second stop request: not waiting for running jobs")
            self._force = True
        else:
            self.state = TERMINATE
            logger.info("worker %s is terminating", self.worker_id)
        self._wake()

    def interrupt(self) -> None:
        """SIGINT: like SIGTERM; a second one exits at once (jobs are then recovered
        by the reaper when their reservations lapse)."""
        self._interrupts += 1
        if self._interrupts >= 2:
            os._exit(FORCED_EXIT)
        self.terminate()

    def _wake(self) -> None:
        self._last_beat = 0.0  # report the new state in the next supervisor tick
        self._poke.set()
        listener = self.listener
        if listener is not None:
            # Not from the signal handler itself: waking PostgreSQL opens a connection.
            threading.Thread(target=listener.wake, daemon=True).start()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.terminate())
        signal.signal(signal.SIGINT, lambda *_: self.interrupt())
        signal.signal(signal.SIGTSTP, lambda *_: self.quiet())
        signal.signal(signal.SIGCONT, lambda *_: self.resume())

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        """Run until told to stop; returns the exit status (0 after a clean shutdown)."""
        if threading.current_thread() is threading.main_thread():
            self.install_signal_handlers()
        self._start()
        try:
            self._loop()
        finally:
            self._shutdown()
        return 0

    def _start(self) -> None:
        self.listener = get_driver(self.using).listener(self.queues)
        lifecycle.register(
            self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            labels=self.labels,
            using=self.using,
        )
        self._last_beat = time.monotonic()
        self.pool.start()
        self.completer.start()
        self._spawn(self._supervise, "ojs-supervisor")
        if self.run_reaper:
            self._spawn(self._reap, "ojs-reaper")
        logger.info(
            "worker %s started: queues=%s concurrency=%d pool=%s handlers=%d",
            self.worker_id,
            ",".join(self.queues),
            self.concurrency,
            self.pool_kind,
            len(self.handlers),
        )

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _loop(self) -> None:
        while self.state != TERMINATE:
            self._poke.clear()
            if self.state == QUIET:
                self._poke.wait(self.poll_interval)
                continue
            free = self.concurrency - len(self.running)
            if free <= 0:
                self._poke.wait(self.poll_interval)  # set when a handler returns
                continue
            if free < self._min_batch and self.running:
                free = self._gather_slots(free)
            # The attempts' clocks start with the claim, as the server's started_at does.
            started = time.monotonic()
            try:
                jobs = lifecycle.fetch(
                    self.queues,
                    free,
                    worker_id=self.worker_id,
                    fields=FETCH_FIELDS,
                    using=self.using,
                )
            except Exception:
                logger.exception("fetch failed; retrying in %.1fs", self.poll_interval)
                connections[self.using].close()
                self._poke.wait(self.poll_interval)
                continue
            # Configured defaults read once per batch (Django settings are slow to read).
            defaults = configured()
            for job in jobs:
                self._submit(job, started, defaults)
            if len(jobs) < free:
                # The queues are empty for now: sleep until a push is notified
                # (PostgreSQL LISTEN) or the poll interval passes.
                self.listener.wait(self.poll_interval)

    def _gather_slots(self, free: int) -> int:
        """A busy worker waits a moment for more free slots, so that one fetch claims a
        batch: a fetch costs a few round trips whatever its size."""
        deadline = time.monotonic() + BATCH_WAIT
        while free < self._min_batch and self.state == RUNNING:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._poke.clear()
            self._poke.wait(left)
            free = self.concurrency - len(self.running)
        return free

    def _submit(self, job: Any, started: float, defaults: Durations) -> None:
        handler = self.handlers.get(job.type)
        durations = effective(job, defaults=defaults)
        ctx = JobContext(
            partial(load_envelope, job.id, self.using),
            job_id=str(job.id),
            attempt=job.attempt,
            beat=self._handler_beat,
            worker_id=self.worker_id,
        )
        attempt = Attempt(
            job_id=job.id,
            attempt=job.attempt,
            type=job.type,
            args=list(job.args or []),
            handler=handler,
            ctx=ctx,
            timeout=ms_to_seconds(durations.timeout_ms),
            grace=ms_to_seconds(durations.grace_ms),
            started=started,
        )
        ctx._progress = lambda value, message, data: self._progress(attempt, value, message, data)
        with self._lock:
            self.running[job.id] = attempt
        self.pool.submit(attempt)

    # ------------------------------------------------------------------ outcomes

    def _finish(self, attempt: Attempt, outcome: Outcome) -> None:
        """A handler returned (runner thread). Queue the outcome unless abandoned."""
        with self._lock:
            if attempt.abandoned or attempt.finished:
                logger.info(
                    "job %s attempt %d finished after it was given up; outcome ignored",
                    attempt.job_id,
                    attempt.attempt,
                )
                return
            attempt.finished = True
            self.running.pop(attempt.job_id, None)
            self.pending[attempt.job_id] = attempt.attempt
        self.completer.put(attempt.job_id, attempt.attempt, outcome)
        self._poke.set()

    def _give_up(self, attempt: Attempt, outcome: Outcome) -> bool:
        """Abandon a running attempt and record ``outcome`` for it now."""
        with self._lock:
            if attempt.abandoned or attempt.finished:
                return False
            attempt.abandoned = True
            self.running.pop(attempt.job_id, None)
            self.pending[attempt.job_id] = attempt.attempt
        self.completer.put(attempt.job_id, attempt.attempt, outcome)
        self._poke.set()
        return True

    def _written(self, job_ids: list[Any]) -> None:
        with self._lock:
            for job_id in job_ids:
                self.pending.pop(job_id, None)

    # ------------------------------------------------------------------ supervisor

    def _supervise(self) -> None:
        try:
            while not self._stop.wait(TICK):
                now = time.monotonic()
                with self._lock:
                    attempts = list(self.running.values())
                for attempt in attempts:
                    if now >= attempt.hard_at:
                        self._hard_timeout(attempt)
                    elif now >= attempt.soft_at and not attempt.soft_fired:
                        self._soft_timeout(attempt)
                if now - self._last_beat >= self.heartbeat_interval:
                    self.heartbeat()
        finally:
            connections.close_all()

    def _soft_timeout(self, attempt: Attempt) -> None:
        # Timeouts §7.2(2): at `timeout` the handler gets its cancellation signal.
        attempt.soft_fired = True
        error = execution.timeout_error(
            attempt.timeout, attempt.elapsed(), attempt.grace, terminated=False
        )
        logger.warning(
            "job %s passed its %gs timeout; cancelling (grace period %gs)",
            attempt.job_id,
            attempt.timeout,
            attempt.grace,
        )
        attempt.ctx.cancel("timeout", error=error)
        self.pool.cancel(attempt)

    def _hard_timeout(self, attempt: Attempt) -> None:
        # Timeouts §7.2(4): at `timeout + grace_period` the attempt is terminated.
        if not attempt.soft_fired:
            self._soft_timeout(attempt)
        error = execution.timeout_error(
            attempt.timeout, attempt.elapsed(), attempt.grace, terminated=True
        )
        if self._give_up(attempt, Outcome(False, error=error)):
            logger.warning(
                "job %s still running %gs after its timeout: terminated", attempt.job_id,
                attempt.grace,
            )  # fmt: skip
            self.pool.abandon(attempt)

    def heartbeat(self) -> None:
        """BEAT with every job this worker holds; apply the reply (worker protocol §4)."""
        with self._beat_lock:
            with self._lock:
                running = list(self.running)
                ids = [*running, *self.pending]
            self._last_beat = time.monotonic()
            try:
                reply = lifecycle.beat(
                    self.worker_id,
                    active_job_ids=ids,
                    state=self.state,
                    using=self.using,
                )
            except Exception:
                # Worker protocol §4.6: keep going in the current state, retry next time.
                logger.warning("heartbeat failed", exc_info=True)
                connections[self.using].close()
                return
        cancelled = {uuid.UUID(job_id) for job_id in reply.cancelled_jobs}
        extended = {uuid.UUID(job_id) for job_id in reply.jobs_extended}
        for job_id in running:
            attempt = self.running.get(job_id)
            if attempt is None or attempt.ctx.is_cancelled or job_id in extended:
                continue
            if job_id in cancelled:
                logger.info("job %s was cancelled; signalling its handler", job_id)
                attempt.ctx.cancel(
                    "cancelled", error={"type": "cancelled", "message": "The job was cancelled"}
                )
            else:
                # Rescued by the reaper (timeout, lapsed reservation) or taken by an
                # operator: whatever the handler returns now will be refused.
                logger.warning("job %s is no longer reserved by this worker", job_id)
                attempt.ctx.cancel(
                    "lost", error={"type": "lost", "message": "The reservation was lost"}
                )
            self.pool.cancel(attempt)
        if reply.state == TERMINATE:
            if self.state != TERMINATE:
                self.terminate()
        elif reply.state == QUIET:
            self.quiet(by_directive=True)
        elif self.state == QUIET and self._quiet_by_directive:
            self.resume()

    def _handler_beat(self) -> None:
        if time.monotonic() - self._last_beat >= MIN_HANDLER_BEAT_INTERVAL:
            self.heartbeat()

    def _child_beat(self, attempt: Attempt) -> bool:
        self._handler_beat()
        return not attempt.ctx.is_cancelled

    def _progress(self, attempt: Attempt, value: float, message: str | None, data: Any) -> None:
        lifecycle.report_progress(
            attempt.job_id,
            value,
            message=message,
            data=data,
            worker_id=self.worker_id,
            using=self.using,
        )
        self._handler_beat()  # timeouts §9.3: progress resets the stall clock

    # ------------------------------------------------------------------ reaper

    def _reap(self) -> None:
        try:
            reaper.run(stop=self._stop, using=self.using)
        finally:
            connections.close_all()

    # ------------------------------------------------------------------ shutdown

    def _shutdown(self) -> None:
        """Worker protocol §7.2: drain up to the grace period, FAIL leftovers, deregister."""
        self.state = TERMINATE
        deadline = time.monotonic() + self.shutdown_grace_period
        next_log = 0.0
        while True:
            with self._lock:
                left = len(self.running)
            now = time.monotonic()
            if not left or self._force or now >= deadline:
                break
            if now >= next_log:
                logger.info(
                    "draining: %d job(s) running, %.1fs of grace period left", left, deadline - now
                )
                next_log = now + 5.0
            self._poke.wait(min(0.1, deadline - now))
            self._poke.clear()
        with self._lock:
            leftovers = list(self.running.values())
        error = execution.shutdown_error(self.shutdown_grace_period)
        for attempt in leftovers:
            attempt.ctx.cancel("shutdown", error=error, requeue=True)
            if self._give_up(attempt, Outcome(False, error=error, requeue=True)):
                logger.warning("job %s did not finish in time: failed as shutdown", attempt.job_id)
        self.pool.stop()
        self.completer.stop(timeout=30)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        try:
            self.heartbeat()  # graceful shutdown §5.3: a last beat saying `terminate`
            lifecycle.deregister(self.worker_id, using=self.using)
        except Exception:
            logger.warning("could not deregister worker %s", self.worker_id, exc_info=True)
        if self.listener is not None:
            self.listener.close()
        logger.info(
            "worker %s stopped: %d completed, %d failed, %d late outcomes ignored",
            self.worker_id,
            self.completer.completed,
            self.completer.failed,
            self.completer.ignored,
        )
        connections.close_all()


def tune_process() -> None:
    """Process-wide settings for a dedicated worker process (``manage.py ojs_worker``).

    The objects built at start-up (Django, the app registry, handler modules) never die:
    freeze them out of the garbage collector's scans, and collect the youngest generation
    less often, since a busy worker allocates many short-lived objects per job.
    """
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])


def run(**options: Any) -> int:
    """Run a worker in this process (the ``ojs_worker`` command); returns the exit status."""
    worker = Worker(**options)
    tune_process()
    return worker.run()
