"""The supervisor: heartbeats, the server's directives, and the execution timeouts.

A thread that ticks every ``TICK`` seconds: it gives a running attempt its cancellation
signal at its soft deadline and abandons it at its hard deadline, and BEATs with every
held job each ``heartbeat_interval`` (worker protocol §4). The reply's cancellations reach
the handlers; its directive (quiet, terminate) goes to the worker. Handlers' own beats and
progress reports come through here too. Database access: ``lifecycle`` calls only.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connections

from django_ojs import lifecycle, resilience
from django_ojs.worker import execution
from django_ojs.worker.attempt import Attempt
from django_ojs.worker.inflight import InFlight
from django_ojs.worker.messages import Outcome
from django_ojs.worker.pool import ProcessPool, ThreadPool

logger = logging.getLogger("django_ojs.worker")

#: How often the supervisor looks at deadlines (seconds).
TICK = 0.05
#: Handler-initiated heartbeats closer together than this share one BEAT.
MIN_HANDLER_BEAT_INTERVAL = 0.25


class Supervisor:
    """Watches the running attempts' deadlines and keeps the worker's heartbeat.

    ``state`` reads the worker's run state (reported in each BEAT); ``obey`` applies the
    state the server replies with (a directive); ``as_of`` says up to when the held jobs
    are complete (``lifecycle.beat``'s ``as_of``; None: do not vouch for the list).
    """

    def __init__(
        self,
        worker_id: str,
        *,
        inflight: InFlight,
        pool: ThreadPool | ProcessPool,
        heartbeat_interval: float,
        state: Callable[[], str],
        obey: Callable[[str], None],
        using: str,
        as_of: Callable[[], datetime | None] = lambda: None,
    ):
        self.worker_id = worker_id
        self.inflight = inflight
        self.pool = pool
        self.heartbeat_interval = heartbeat_interval
        self.state = state
        self.obey = obey
        self.using = using
        self.as_of = as_of
        self.last_beat = time.monotonic()
        self._beat_lock = threading.Lock()
        self.outage = resilience.Outage("heartbeat", logger, using=using)
        self.progress_outage = resilience.Outage("progress", logger, using=using)

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set (the supervisor thread's target)."""
        try:
            while not stop.wait(TICK):
                now = time.monotonic()
                for attempt in self.inflight.attempts():
                    if now >= attempt.hard_at:
                        self.hard_timeout(attempt)
                    elif now >= attempt.soft_at and not attempt.soft_fired:
                        self.soft_timeout(attempt)
                if now - self.last_beat >= self.heartbeat_interval:
                    self.heartbeat()
        finally:
            connections.close_all()

    def beat_soon(self) -> None:
        """Report a state change in the next tick rather than at the next interval."""
        self.last_beat = 0.0

    # ------------------------------------------------------------------ timeouts

    def soft_timeout(self, attempt: Attempt) -> None:
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

    def hard_timeout(self, attempt: Attempt) -> None:
        # Timeouts §7.2(4): at `timeout + grace_period` the attempt is terminated.
        if not attempt.soft_fired:
            self.soft_timeout(attempt)
        error = execution.timeout_error(
            attempt.timeout, attempt.elapsed(), attempt.grace, terminated=True
        )
        if self.inflight.give_up(attempt, Outcome(False, error=error)):
            logger.warning(
                "job %s still running %gs after its timeout: terminated", attempt.job_id,
                attempt.grace,
            )  # fmt: skip
            self.pool.abandon(attempt)

    # ------------------------------------------------------------------ heartbeats

    def heartbeat(self) -> None:
        """BEAT with every job this worker holds; apply the reply (worker protocol §4)."""
        with self._beat_lock:
            # Read before the list: the jobs claimed before it are all in the list (or
            # never arrived, and the server gives them back).
            as_of = self.as_of()
            running, held = self.inflight.held()
            self.last_beat = time.monotonic()
            try:
                reply = lifecycle.beat(
                    self.worker_id, active_job_ids=held, state=self.state(), as_of=as_of,
                    using=self.using,
                )  # fmt: skip
            except Exception as exc:
                # Worker protocol §4.6: keep going in the current state, retry next time.
                if resilience.is_connection_error(exc):
                    # Sooner than the next interval while the back-off delay is short.
                    delay = min(self.outage.failed(exc), self.heartbeat_interval)
                    self.last_beat = time.monotonic() - self.heartbeat_interval + delay
                else:
                    logger.warning("heartbeat failed", exc_info=True)
                    connections[self.using].close()
                return
            self.outage.succeeded()
        cancelled = {uuid.UUID(job_id) for job_id in reply.cancelled_jobs}
        extended = {uuid.UUID(job_id) for job_id in reply.jobs_extended}
        for job_id in running:
            attempt = self.inflight.get(job_id)
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
        self.obey(reply.state)

    def handler_beat(self) -> None:
        """A handler called ``ctx.heartbeat()``: BEAT now unless one was just sent."""
        if time.monotonic() - self.last_beat >= MIN_HANDLER_BEAT_INTERVAL:
            self.heartbeat()

    def child_beat(self, attempt: Attempt) -> bool:
        """A process-pool child's ``ctx.heartbeat()``: False once the job is cancelled."""
        self.handler_beat()
        return not attempt.ctx.is_cancelled

    def progress(self, job_id: Any, value: float, message: str | None, data: Any) -> None:
        """A handler reported progress (``ctx.progress()``). Progress is best effort: it
        is dropped, not raised into the handler, while the database is unavailable."""
        try:
            lifecycle.report_progress(
                job_id, value, message=message, data=data, worker_id=self.worker_id,
                using=self.using,
            )  # fmt: skip
        except resilience.CONNECTION_ERRORS as exc:
            self.progress_outage.failed(exc)
            return
        self.progress_outage.succeeded()
        self.handler_beat()  # timeouts §9.3: progress resets the stall clock
