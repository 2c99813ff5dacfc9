"""What the worker pool tests share: queues filled with jobs, and a pool whose low queue
starves (fair scheduling §8.1) on a clock they move."""

from __future__ import annotations

from typing import Any

import django_ojs
from django_ojs import lifecycle


def fill(queue: str, n: int) -> None:
    django_ojs.enqueue_many([{"type": "t.x", "args": [i], "queue": queue} for i in range(n)])


def starving_pool() -> tuple[Any, list[float]]:
    """A strict pool ``general`` of ``critical`` (20 jobs) before ``low`` (5), with
    starvation prevention every 30 s: its fetch, and the clock (``now[0]``) its
    scheduler reads, which the test moves."""
    from django_ojs.lifecycle import pools as pool_state

    fill("critical", 20)
    fill("low", 5)
    lifecycle.save_pool(
        "general", ["critical", "low"], strategy="strict",
        starvation={"enabled": True, "rotation_interval": "PT30S", "min_dispatch_ratio": 0},
    )  # fmt: skip
    fetch = lifecycle.PoolFetch("general")
    _, scheduler = pool_state.scheduler_for("general", fetch.using)
    now = [1000.0]
    scheduler.clock = lambda: now[0]
    scheduler.last_served = dict.fromkeys(scheduler.last_served, 1000.0)
    return fetch, now
