"""Lifecycle events (OJS events spec): one function writes them, in the caller's transaction.

Rows go to the ``Event`` table in the same transaction as the transition (so a rolled-back
job emits nothing), unless ``OJS_STORE_EVENTS`` is off. The ``event_emitted`` Django signal
is sent for each event after the transaction commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from uuid6 import uuid7

from django_ojs import envelope, signals
from django_ojs.conf import settings
from django_ojs.models import Event, Job


def job_data(job: Job, **data: Any) -> dict[str, Any]:
    """The data every job event carries (events §3, conformance L0-EVT-002)."""
    out: dict[str, Any] = {
        "job_id": str(job.id),
        "job_type": job.type,
        "queue": job.queue,
        "state": job.state,
    }
    trace_id = (job.meta or {}).get("trace_id") if isinstance(job.meta, dict) else None
    if trace_id is not None:
        out["trace_id"] = trace_id  # events §8.3: MUST propagate
    for key, value in data.items():
        if isinstance(value, datetime):
            value = envelope.format_timestamp(value)
        if value is not None:
            out[key] = value
    return out


def emit_job(kind: str, job: Job, using: str, when: datetime | None = None, **data: Any) -> None:
    """Record one job event (``kind`` like ``"job.completed"``)."""
    emit_many([(kind, job, data)], using, when)


def emit_many(
    items: Iterable[tuple[str, Job, dict[str, Any]]], using: str, when: datetime | None = None
) -> None:
    """Record several job events with one INSERT."""
    when = when or timezone.now()
    source = settings.EVENT_SOURCE
    rows = [
        Event(
            id=uuid7(),
            type=kind,
            source=source,
            subject=str(job.id),
            time=when,
            job_id=job.id,
            queue=job.queue,
            data=job_data(job, **data),
        )
        for kind, job, data in items
    ]
    _store_and_signal(rows, using)


def emit_other(kind: str, subject: str, using: str, *, queue: str = "", **data: Any) -> None:
    """Record an event that is not about one job (``queue.paused``, ``worker.started``...)."""
    row = Event(
        id=uuid7(),
        type=kind,
        source=settings.EVENT_SOURCE,
        subject=subject,
        time=timezone.now(),
        queue=queue,
        data={k: v for k, v in data.items() if v is not None},
    )
    _store_and_signal([row], using)


def _store_and_signal(rows: list[Event], using: str) -> None:
    if not rows:
        return
    if settings.STORE_EVENTS:
        Event.objects.using(using).bulk_create(rows)
    if signals.event_emitted.has_listeners():
        envelopes = [row.to_wire() for row in rows]

        def send() -> None:
            for env in envelopes:
                signals.event_emitted.send(sender=Event, event=env)

        transaction.on_commit(send, using=using)
