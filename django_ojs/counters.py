"""What ``lifecycle`` reports as it goes (jobs dispatched, queues starved; fair scheduling
§11.2), for whoever counts them in this process: the Prometheus metrics
(``django_ojs.metrics``) once this process serves them. Nothing counts by default, and a
report then costs one read of a module attribute: the claim path pays nothing for
metrics a site does not serve. ``lifecycle`` imports this module, never ``metrics``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class Counter(Protocol):
    def dispatched(self, jobs: Sequence[Any], pool: str, queues: Sequence[str]) -> None: ...

    def starved(self, queue: str) -> None: ...


_counter: Counter | None = None


def count_with(counter: Counter | None) -> None:
    """Send the reports of this process to ``counter`` (``None``: to nobody)."""
    global _counter
    _counter = counter


def dispatched(jobs: Sequence[Any], pool: str, queues: Sequence[str]) -> None:
    """``jobs`` were claimed for ``pool`` (``""``: none) from the fetch's ``queues``."""
    counter = _counter
    if counter is not None:
        counter.dispatched(jobs, pool, queues)


def starved(queue: str) -> None:
    """``queue`` was served by a pool's rotation after starving (``scheduling.queue_starved``)."""
    counter = _counter
    if counter is not None:
        counter.starved(queue)
