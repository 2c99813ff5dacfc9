"""A clock a test moves by hand, to patch over a module's ``time.monotonic``."""

from __future__ import annotations


class ManualClock:
    """Callable like ``time.monotonic``; it reads ``now``, which the test advances."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
