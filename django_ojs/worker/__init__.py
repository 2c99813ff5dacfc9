"""The in-process worker behind ``manage.py ojs_worker``.

:class:`Worker` (``loop.py``) composes small parts: the fetcher claims jobs
(``fetcher.py``), handlers run in a thread or process pool (``pool.py``, ``child.py``,
which exchange the typed messages of ``messages.py``), outcomes are written in batches
(``completion.py``) and the supervisor heartbeats and enforces timeouts
(``supervisor.py``). Imported lazily: a process-pool child imports ``worker.child``
before Django is set up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_ojs.worker.loop import Worker, run

__all__ = ["Worker", "run"]

MODULES = (
    "attempt", "child", "completion", "context", "execution", "fetcher", "inflight",
    "loop", "messages", "pool", "supervisor",
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in ("Worker", "run"):
        return getattr(importlib.import_module("django_ojs.worker.loop"), name)
    if name in MODULES:
        return importlib.import_module(f"django_ojs.worker.{name}")
    raise AttributeError(f"module 'django_ojs.worker' has no attribute {name!r}")
