"""The in-process worker behind ``manage.py ojs_worker``.

:class:`Worker` (``loop.py``) schedules ``lifecycle`` calls; handlers run in a thread or
process pool (``pool.py``); outcomes are written in batches (``completion.py``).
"""

from __future__ import annotations

from django_ojs.worker.loop import Worker, run

__all__ = ["Worker", "run"]
