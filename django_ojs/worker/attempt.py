"""One running attempt as the worker tracks it: the job, its handler, context and deadlines.

Plain bookkeeping; the worker loop decides what happens to it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django_ojs.context import JobContext
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
    started: float = field(default_factory=time.monotonic)
    soft_fired: bool = False
    #: Given up on (hard timeout, shutdown): a late outcome is ignored.
    abandoned: bool = False
    finished: bool = False

    @property
    def soft_at(self) -> float:
        return self.started + self.timeout

    @property
    def hard_at(self) -> float:
        return self.started + self.timeout + self.grace

    def elapsed(self) -> float:
        return time.monotonic() - self.started
