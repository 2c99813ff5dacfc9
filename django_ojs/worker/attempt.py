"""One running attempt as the worker tracks it: the job, its handler, context and deadlines.

The deadlines are the ones the claim stored on the job (``started_at``, ``timeout_at``),
moved onto the monotonic clock once, when the attempt is built; they are not recomputed
from the timeouts. Plain bookkeeping: the supervisor decides what happens at a deadline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from django_ojs.context import JobContext
from django_ojs.policy import Durations, ms_to_seconds
from django_ojs.registry import Handler


@dataclass(eq=False)
class Attempt:
    job_id: Any  # uuid.UUID
    attempt: int
    type: str
    args: list[Any]
    handler: Handler | None
    ctx: JobContext
    #: Execution timeout and grace period of this attempt, in seconds (timeouts §5.1, §5.4).
    timeout: float
    grace: float
    #: Monotonic time the attempt started (the claim's ``started_at``).
    started: float
    #: Monotonic hard deadline: the claim's ``timeout_at`` (start + timeout + grace).
    hard_at: float
    soft_fired: bool = False
    #: Given up on (hard timeout, shutdown): a late outcome is ignored.
    abandoned: bool = False
    finished: bool = False

    @property
    def soft_at(self) -> float:
        """Timeouts §7.2(2): the cancellation signal is due a grace period before the end."""
        return self.hard_at - self.grace

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Clock:
    """One reading of the wall clock and the monotonic clock, to translate stored times."""

    def __init__(self) -> None:
        self.wall = timezone.now()
        self.mono = time.monotonic()

    def monotonic(self, at: datetime) -> float:
        """The monotonic time of wall-clock time ``at``: ``mono_now + (at - wall_now)``."""
        return self.mono + (at - self.wall).total_seconds()


def build(
    job: Any, *, handler: Handler | None, ctx: JobContext, durations: Durations, clock: Clock
) -> Attempt:
    """The attempt of a freshly claimed ``job`` (its ``started_at`` and ``timeout_at`` set).

    ``durations`` is :func:`~django_ojs.policy.effective` for the job: it gives the split
    of the stored hard deadline into timeout and grace period. A job without stored
    times (a driver that did not return them) falls back to ``now`` plus the durations.
    """
    timeout = ms_to_seconds(durations.timeout_ms)
    grace = ms_to_seconds(durations.grace_ms)
    started = clock.monotonic(job.started_at) if job.started_at is not None else clock.mono
    hard_at = (
        clock.monotonic(job.timeout_at) if job.timeout_at is not None else started + timeout + grace
    )
    return Attempt(
        job_id=job.id,
        attempt=job.attempt,
        type=job.type,
        args=list(job.args or []),
        handler=handler,
        ctx=ctx,
        timeout=timeout,
        grace=grace,
        started=started,
        hard_at=hard_at,
    )
