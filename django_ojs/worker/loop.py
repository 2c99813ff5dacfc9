"""The worker: composes the parts of one ``ojs_worker`` process and owns its run state.

:class:`Worker` holds the configuration, the run state (running, quiet, terminate) and the
signal handlers, and wires the parts together: the fetcher (``fetcher.py``) claims jobs,
the pool (``pool.py``) runs handlers, the outcome writer (``completion.py``) records
results, the supervisor (``supervisor.py``) heartbeats and enforces timeouts, and
optionally the reaper runs too. Database access: ``lifecycle`` calls only, in those parts.
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
from datetime import datetime
from typing import Any, TypeVar

from django.db import connections

from django_ojs import lifecycle, reaper
from django_ojs.conf import settings
from django_ojs.registry import Registry, registry
from django_ojs.worker import execution
from django_ojs.worker.attempt import Attempt
from django_ojs.worker.completion import Completer
from django_ojs.worker.fetcher import FETCH_FIELDS, QUIET, RUNNING, TERMINATE, Fetcher
from django_ojs.worker.inflight import InFlight
from django_ojs.worker.messages import Outcome
from django_ojs.worker.pool import ProcessPool, ThreadPool
from django_ojs.worker.supervisor import Supervisor

logger = logging.getLogger("django_ojs.worker")

T = TypeVar("T")
POOLS = ("threads", "processes")
#: Allocations between young-generation collections in a worker process (Python: 700).
GC_THRESHOLD = 20_000
#: Exit status after a second SIGINT (128 + SIGINT, as a shell reports it).
FORCED_EXIT = 130


def default_worker_id() -> str:
    return f"worker-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def given(value: T | None, setting: T) -> T:
    """An option's value, or the setting when it was not given (``None``)."""
    return setting if value is None else value


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
    worker_pool:
        Join this worker pool (fair scheduling §6): fetch from its queues, in the order
        and amounts its strategy chooses. Excludes ``queues``.
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
        worker_pool: str | None = None,
        using: str | None = None,
    ):
        self.worker_pool = worker_pool or ""
        if self.worker_pool and queues:
            raise ValueError("a worker in a pool fetches from the pool's queues: give no queues")
        self.queues = list(queues or settings.WORKER_QUEUES)
        self.concurrency = given(concurrency, settings.WORKER_CONCURRENCY)
        self.pool_kind = pool or settings.WORKER_POOL
        if self.pool_kind not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, not {self.pool_kind!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.poll_interval = given(poll_interval, settings.WORKER_POLL_INTERVAL)
        self.shutdown_grace_period = given(shutdown_grace_period, settings.SHUTDOWN_GRACE_PERIOD)
        self.heartbeat_interval = given(heartbeat_interval, settings.WORKER_HEARTBEAT_INTERVAL)
        self.run_reaper = given(run_reaper, settings.WORKER_RUN_REAPER)
        self.worker_id = worker_id or default_worker_id()
        self.labels = list(labels)
        self.handlers = handlers or registry
        self.using = lifecycle.database(using)
        pool_fetch = None
        if self.worker_pool:
            # The pool's queues (read again as it changes) and strategy (§5.2: the
            # server's configuration over the worker's).
            pool_fetch = lifecycle.PoolFetch(
                self.worker_pool, worker_id=self.worker_id, fields=FETCH_FIELDS,
                register=False, using=self.using,
            )  # fmt: skip
            self.queues = pool_fetch.queues

        self.state = RUNNING
        self._quiet_by_directive = False
        self._force = False
        self._interrupts = 0
        #: Set when a slot frees up or the state changes: wakes the fetcher and the drain.
        self._wakeup = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.listener: Any = None
        self.completer = Completer(self.worker_id, using=self.using, on_written=self._written)
        self.inflight = InFlight(self.completer.put, self._wakeup)
        self.pool: ThreadPool | ProcessPool
        if self.pool_kind == "processes":
            self.pool = ProcessPool(
                self.concurrency,
                self.inflight.finish,
                on_beat=self._child_beat,
                on_progress=self._child_progress,
                using=self.using,
            )
        else:
            self.pool = ThreadPool(self.concurrency, self.inflight.finish)
        self.supervisor = Supervisor(
            self.worker_id,
            inflight=self.inflight,
            pool=self.pool,
            heartbeat_interval=self.heartbeat_interval,
            state=lambda: self.state,
            obey=self.obey,
            using=self.using,
            as_of=self._as_of,
        )
        self.fetcher = Fetcher(
            self.worker_id,
            queues=self.queues,
            concurrency=self.concurrency,
            poll_interval=self.poll_interval,
            handlers=self.handlers,
            inflight=self.inflight,
            pool=self.pool,
            state=lambda: self.state,
            wakeup=self._wakeup,
            beat=self.supervisor.handler_beat,
            progress=self.supervisor.progress,
            using=self.using,
            fetch=pool_fetch,
        )

    @property
    def running(self) -> dict[Any, Attempt]:
        """The attempts whose handlers are running, by job id."""
        return self.inflight.running

    @property
    def pending(self) -> dict[Any, int]:
        """Finished attempts whose outcomes are not written yet, by job id."""
        return self.inflight.pending

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

    def obey(self, directive: str) -> None:
        """Apply the state a heartbeat reply asks for (worker protocol §4, §9)."""
        if directive == TERMINATE:
            if self.state != TERMINATE:
                self.terminate()
        elif directive == QUIET:
            self.quiet(by_directive=True)
        elif self.state == QUIET and self._quiet_by_directive:
            self.resume()

    def _wake(self) -> None:
        self.supervisor.beat_soon()  # report the new state in the next supervisor tick
        self._wakeup.set()
        listener = self.listener
        if listener is not None:
            # Not from the signal handler itself: waking PostgreSQL opens a connection.
            threading.Thread(target=listener.wake, daemon=True).start()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.terminate())
        signal.signal(signal.SIGINT, lambda *_: self.interrupt())
        signal.signal(signal.SIGTSTP, lambda *_: self.quiet())
        signal.signal(signal.SIGCONT, lambda *_: self.resume())

    def heartbeat(self) -> None:
        """BEAT now with every job this worker holds, and apply the reply."""
        self.supervisor.heartbeat()

    def _child_beat(self, attempt: Attempt) -> bool:
        return self.supervisor.child_beat(attempt)

    def _child_progress(
        self, attempt: Attempt, value: float, message: str | None, data: Any
    ) -> None:
        self.supervisor.progress(attempt.job_id, value, message, data)

    def _as_of(self) -> datetime | None:
        """What a heartbeat vouches for (``lifecycle.beat``'s ``as_of``): every job its
        fetches received before this time is in its list. Not once terminating, nor after
        an outcome was given up unwritten: those jobs ran and are no longer listed, so
        their reservations must lapse instead."""
        if self.state == TERMINATE or self.completer.unwritten:
            return None
        return self.fetcher.received_before()

    def _written(self, job_ids: list[Any]) -> None:
        self.inflight.written(job_ids)

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until told to stop; returns the exit status (0 after a clean shutdown)."""
        if threading.current_thread() is threading.main_thread():
            self.install_signal_handlers()
        self._start()
        try:
            self.fetcher.run(self.listener)
        finally:
            self._shutdown()
        return 0

    def _start(self) -> None:
        self.listener = lifecycle.listen(self.queues, using=self.using)
        # Ready before registered: a process pool's children have set Django up by then.
        self.pool.start()
        lifecycle.register(
            self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=self.queues,
            concurrency=self.concurrency,
            labels=self.labels,
            pool=self.worker_pool,
            using=self.using,
        )
        self.supervisor.last_beat = time.monotonic()
        self.completer.start()
        self._spawn(lambda: self.supervisor.run(self._stop), "ojs-supervisor")
        if self.run_reaper:
            self._spawn(self._reap, "ojs-reaper")
        logger.info(
            "worker %s started: %squeues=%s concurrency=%d pool=%s handlers=%d",
            self.worker_id,
            f"worker pool {self.worker_pool} " if self.worker_pool else "",
            ",".join(self.queues),
            self.concurrency,
            self.pool_kind,
            len(self.handlers),
        )

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

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
        self.inflight.drain(deadline, forced=lambda: self._force)
        error = execution.shutdown_error(self.shutdown_grace_period)
        self.inflight.give_up_all("shutdown", Outcome(False, error=error, requeue=True))
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
