"""Pool isolation (OJS fair scheduling §6.3, FS-R006): which queues only their pools'
workers may take.

A pool saved with ``isolated`` keeps its queues to itself: a fetch made for no pool, or
for another pool, gets nothing from them (an empty claim, not an error: see
``docs/explanation/spec-readings.md``). Every fetch asks :func:`isolated_queues`, a
per-process copy of the isolated pools' queues read at most once per
:data:`REFRESH_SECONDS` (as a pool's own row is): with no isolated pool, no statement on
the claim path but that one read a second. A change made in this process is seen at once
(``save_pool`` and ``delete_pool`` call :func:`forget`); another process's within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from django_ojs.models import WorkerPool

#: Seconds a process keeps its copy of the isolated pools' queues.
REFRESH_SECONDS = 1.0

#: Per database alias: (when read, {queue: the isolated pools that have it}).
_cache: dict[str, tuple[float, dict[str, frozenset[str]]]] = {}
_lock = threading.Lock()
_clock = time.monotonic


def isolated_queues(using: str) -> Mapping[str, frozenset[str]]:
    """Each queue of an isolated pool, with the isolated pools that have it."""
    now = _clock()
    cached = _cache.get(using)
    if cached is not None and now - cached[0] < REFRESH_SECONDS:
        return cached[1]
    owners: dict[str, set[str]] = {}
    for name, queues in (
        WorkerPool.objects.using(using).filter(isolated=True).values_list("name", "queues")
    ):
        for queue in queues or ():
            owners.setdefault(queue, set()).add(name)
    frozen = {queue: frozenset(names) for queue, names in owners.items()}
    with _lock:
        _cache[using] = (now, frozen)
    return frozen


def allowed(queues: Sequence[str], pool: str | None, using: str) -> list[str]:
    """``queues`` less those of isolated pools other than ``pool`` (``None``: no pool)."""
    owners = isolated_queues(using)
    if not owners:
        return list(queues)
    return [q for q in queues if q not in owners or (pool is not None and pool in owners[q])]


def forget(using: str | None = None) -> None:
    """Drop this process's copy (of ``using``, or of every database)."""
    with _lock:
        if using is None:
            _cache.clear()
        else:
            _cache.pop(using, None)
