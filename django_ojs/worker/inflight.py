"""The attempts a worker holds: running (a handler has them) and pending (outcome not written).

Shared by the fetcher (adds), the pool (a handler returned), the supervisor (gives up at a
hard timeout, heartbeats every held job), the outcome writer (written) and the shutdown
(drains, gives up leftovers). One lock; each attempt's outcome is queued for writing
exactly once, whoever gets there first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django_ojs.worker.attempt import Attempt
from django_ojs.worker.messages import Outcome

logger = logging.getLogger("django_ojs.worker")

Record = Callable[[Any, int, Outcome], None]
#: Seconds between "draining" log lines during a graceful shutdown.
DRAIN_LOG_INTERVAL = 5.0


class InFlight:
    """Running and pending attempts; ``changed`` is set when slots free up (see
    :meth:`wake_when`)."""

    def __init__(self, record: Record, changed: threading.Event):
        self.record = record
        self.changed = changed
        self.lock = threading.Lock()
        self.running: dict[Any, Attempt] = {}
        #: Outcome queued, not yet written: still heartbeated, so the reservation holds.
        self.pending: dict[Any, int] = {}
        # See wake_when(): by default every slot that frees up sets ``changed``.
        self._full: int | None = None
        self._enough = 0

    def wake_when(self, *, capacity: int, batch: int) -> None:
        """Set ``changed`` when a slot frees up in a full worker (``capacity`` running)
        and once ``batch`` slots are free, not for each slot in between.

        The fetcher waits for a batch of free slots, up to a deadline, before it claims:
        woken by every returning handler, it ran (and took the interpreter's lock from
        the handlers) about ``batch`` times per claim only to find too few slots free.
        """
        self._full = capacity
        self._enough = capacity - batch

    def __len__(self) -> int:
        return len(self.running)

    def add(self, attempt: Attempt) -> None:
        with self.lock:
            self.running[attempt.job_id] = attempt

    def get(self, job_id: Any) -> Attempt | None:
        return self.running.get(job_id)

    def attempts(self) -> list[Attempt]:
        with self.lock:
            return list(self.running.values())

    def held(self) -> tuple[list[Any], list[Any]]:
        """The ids of running jobs, and of every job held (running or pending)."""
        with self.lock:
            running = list(self.running)
            return running, [*running, *self.pending]

    def finish(self, attempt: Attempt, outcome: Outcome) -> None:
        """A handler returned (runner thread). Queue the outcome unless abandoned."""
        if not self._settle(attempt, outcome, abandon=False):
            logger.info(
                "job %s attempt %d finished after it was given up; outcome ignored",
                attempt.job_id,
                attempt.attempt,
            )

    def give_up(self, attempt: Attempt, outcome: Outcome) -> bool:
        """Abandon a running attempt and record ``outcome`` for it now."""
        return self._settle(attempt, outcome, abandon=True)

    def _settle(self, attempt: Attempt, outcome: Outcome, *, abandon: bool) -> bool:
        with self.lock:
            if attempt.abandoned or attempt.finished:
                return False
            if abandon:
                attempt.abandoned = True
            else:
                attempt.finished = True
            self.running.pop(attempt.job_id, None)
            self.pending[attempt.job_id] = attempt.attempt
            left = len(self.running)
        self.record(attempt.job_id, attempt.attempt, outcome)
        full = self._full
        if full is None or left >= full - 1 or left <= self._enough:
            self.changed.set()
        return True

    def written(self, job_ids: list[Any]) -> None:
        """The outcome writer recorded (or gave up on) these jobs: no longer held."""
        with self.lock:
            for job_id in job_ids:
                self.pending.pop(job_id, None)

    def drain(self, deadline: float, *, forced: Callable[[], bool]) -> None:
        """Wait until no handler runs, ``deadline`` (monotonic) passes or ``forced()``."""
        next_log = 0.0
        while True:
            left = len(self.running)
            now = time.monotonic()
            if not left or forced() or now >= deadline:
                return
            if now >= next_log:
                logger.info(
                    "draining: %d job(s) running, %.1fs of grace period left", left, deadline - now
                )
                next_log = now + DRAIN_LOG_INTERVAL
            self.changed.wait(min(0.1, deadline - now))
            self.changed.clear()

    def give_up_all(self, reason: str, outcome: Outcome) -> None:
        """Signal every running handler to stop and record ``outcome`` for it now."""
        for attempt in self.attempts():
            attempt.ctx.cancel(reason, error=outcome.error, requeue=outcome.requeue)
            if self.give_up(attempt, outcome):
                logger.warning(
                    "job %s did not finish in time: failed as %s", attempt.job_id, reason
                )
