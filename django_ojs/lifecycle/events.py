"""Lifecycle events (OJS events spec): one place builds them, in the caller's transaction.

Rows go to the ``Event`` table in the same transaction as the transition (so a rolled-back
job emits nothing), unless ``OJS_STORE_EVENTS`` is off. The ``event_emitted`` Django signal
is sent for each event after the transaction commits. Rows are plain tuples
(:class:`EventRow`) so that hot paths (push, fetch) can hand them to the driver in bulk.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import signals
from django_ojs.conf import settings
from django_ojs.drivers import EventMode, EventRow, get_driver, job_data
from django_ojs.drivers import job_rows as build_rows
from django_ojs.ids import uuid7_at
from django_ojs.models import Event, Job

__all__ = ["EventRow", "emit_job", "emit_many", "emit_other", "job_data", "job_rows", "mode"]


def mode() -> EventMode:
    """What the drivers do with the events of this operation (stored, returned or neither)."""
    # Rows come back to Python only when a receiver will be sent them.
    if settings.STORE_EVENTS:
        return EventMode.STORE_RETURN if listened() else EventMode.STORE
    return EventMode.RETURN if listened() else EventMode.NONE


def listened() -> bool:
    """Whether a receiver is connected to ``event_emitted`` (the one place that asks)."""
    return signals.event_emitted.has_listeners()


def job_rows(
    items: Iterable[tuple[str, Job, dict[str, Any]]], when: datetime | None = None
) -> list[EventRow]:
    """Build (not store) the rows for ``(kind, job, data)`` items."""
    return build_rows(items, settings.EVENT_SOURCE, when)


def emit_job(kind: str, job: Job, using: str, when: datetime | None = None, **data: Any) -> None:
    """Record one job event (``kind`` like ``"job.completed"``)."""
    emit_many([(kind, job, data)], using, when)


def emit_many(
    items: Iterable[tuple[str, Job, dict[str, Any]]], using: str, when: datetime | None = None
) -> None:
    """Record several job events with one write."""
    rows = job_rows(items, when)
    store(rows, using)
    signal(rows, using)


def emit_other(kind: str, subject: str, using: str, *, queue: str = "", **data: Any) -> None:
    """Record an event that is not about one job (``queue.paused``, ``worker.started``...)."""
    now = timezone.now()
    row = EventRow(
        uuid7_at(now),
        kind,
        settings.EVENT_SOURCE,
        subject,
        now,
        None,
        queue,
        {k: v for k, v in {"queue": queue or None, **data}.items() if v is not None},
    )
    store([row], using)
    signal([row], using)


def store(rows: list[EventRow], using: str) -> None:
    """Write ``rows`` in the current transaction (no-op when ``OJS_STORE_EVENTS`` is off)."""
    if rows and settings.STORE_EVENTS:
        get_driver(using).insert_events(rows)


def signal(rows: list[EventRow], using: str) -> None:
    """Send ``event_emitted`` for each row once the current transaction commits."""
    if not rows or not listened():
        return
    envelopes = [row.to_wire() for row in rows]

    def send() -> None:
        for env in envelopes:
            signals.event_emitted.send(sender=Event, event=env)

    transaction.on_commit(send, using=using)
