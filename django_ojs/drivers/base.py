"""The driver contract: the few operations whose SQL differs between databases.

``lifecycle`` calls a driver for the claim, for queue registration + wake-up notification
after a push, and for waiting on new work. Nothing else in django-ojs branches on the
database vendor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django_ojs.models import Job
    from django_ojs.policy import Durations


class Driver(Protocol):
    """What every driver implements.

    Optional fast paths, looked up with ``getattr`` by ``lifecycle`` and used only when no
    receiver is connected to ``signals.event_emitted`` (they write event rows in SQL, and
    the signal needs Python rows); the PostgreSQL driver has them, SQLite does not:

    * ``claim_writes_events`` (bool): ``claim`` also writes the ``job.started`` events;
    * ``push_many(jobs, available, *, now, source)``: bulk push with enqueue events in SQL;
    * ``ack_one(job_id, result, *, worker_id, now, source, store_events)``: one-statement
      ACK returning the completed job, or ``None`` when no row qualifies;
    * ``ack_many(items, *, worker_id, now, source, store_events)``: one-statement batch ACK.
    """

    vendor: str

    def claim(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None = None,
        event_source: str | None = None,
    ) -> list[Job]:
        """Atomically move up to ``limit`` available jobs of ``queue`` to ``active``.

        ``fields``: load only these job fields (and ``id``); a driver may load more.
        ``event_source``: write the ``job.started`` events too, with this source (only
        asked of drivers whose ``claim_writes_events`` is true).

        Order: priority high→low, then FIFO (id). Skips paused queues and jobs past their
        ``stale_at``. Sets ``attempt += 1``, ``started_at``, ``worker_id`` and the
        visibility/timeout/stall deadlines. Runs inside the caller's transaction.
        """
        ...

    #: True when :meth:`push` of one job is a single atomic statement, so the caller
    #: needs no transaction around it.
    single_statement_push: bool

    def push(self, jobs: list[Job], events: list[tuple[Any, ...]], available: set[str]) -> None:
        """Insert new jobs and their event rows, register their queues and wake workers.

        ``available`` names the queues that received available jobs. Runs in the caller's
        transaction; wake-ups are delivered only on commit.
        """
        ...

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        """Insert event rows (``lifecycle.events.EventRow`` tuples) in the transaction."""
        ...

    def after_push(self, queues: set[str], available: set[str]) -> None:
        """Register ``queues`` (idempotent) and wake workers of the ``available`` ones.

        Runs inside the pushing transaction; wake-ups are delivered only on commit.
        """
        ...

    def try_lock(self, name: str) -> bool:
        """Try to take a lock named ``name`` until the current transaction ends.

        Used for leader election among reapers; True when this caller holds it.
        """
        ...

    def listener(self, queues: list[str]) -> Listener:
        """A new object that waits for work in ``queues`` (one per worker loop)."""
        ...


class Listener(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until work may be available or ``timeout`` seconds pass.

        Returns True when woken by a notification, False on timeout or :meth:`wake`.
        """
        ...

    def wake(self) -> None:
        """Make a pending :meth:`wait` return now (from another thread)."""
        ...

    def close(self) -> None:
        """Release the listening connection, if any."""
        ...
