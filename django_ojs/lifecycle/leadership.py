"""Leadership of a maintenance pass: at most one process at a time does a named job.

The lock is transaction-scoped (a PostgreSQL advisory lock; SQLite's write lock serialises
writers anyway), so :func:`lead` opens the transaction the work runs in and the lock goes
with its commit. Vendor differences stay behind the driver's ``try_lock``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

from django_ojs.drivers import get_driver
from django_ojs.lifecycle.store import db


@contextmanager
def lead(name: str, *, using: str | None = None) -> Iterator[bool]:
    """A transaction in which this process holds the lock ``name`` if it is free.

    Yields True when it holds it (do the work inside the ``with`` block), False when
    another process does; the transaction commits when the block ends::

        with lifecycle.lead("django_ojs.reaper") as leader:
            if leader:
                lifecycle.promote_due()
    """
    using = db(using)
    with transaction.atomic(using=using):
        yield get_driver(using).try_lock(name)
