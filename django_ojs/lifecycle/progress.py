"""Progress of a running attempt (OJS progress extension, events ``job.progress``).

Progress is recorded as a ``job.progress`` event; it needs no column and never changes
state. Resetting the stall clock is BEAT's job (``workers.beat``), which callers also send.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import envelope
from django_ojs.exceptions import JobNotFound
from django_ojs.lifecycle import events
from django_ojs.lifecycle.store import db, parse_id, require_holder
from django_ojs.models import Job
from django_ojs.states import JobState
from django_ojs.validation import validate_progress, validate_worker_id


def progress_of(job_id: Any, *, using: str | None = None) -> Job:
    """The job with its last progress report (``last_progress``); raises JobNotFound."""
    job = (
        Job.objects.using(db(using))
        .filter(pk=parse_id(job_id))
        .only("id", "state", "queue", "last_progress")
        .first()
    )
    if job is None:
        raise JobNotFound(job_id)
    return job


def report_progress(
    job_id: Any,
    value: float,
    *,
    message: str | None = None,
    data: dict[str, Any] | None = None,
    worker_id: str | None = None,
    using: str | None = None,
) -> bool:
    """Record that an active job is ``value`` (0.0-1.0, clamped) done; False if not active.

    The event carries ``progress`` (0-1), ``progress_percent`` (0-100, events §10.10),
    ``progress_message`` and optional structured ``data``. Raises
    :class:`ReservationMismatch` when ``worker_id`` does not hold the job.
    """
    using = db(using)
    value, message, data = validate_progress(value, message, data)
    worker_id = validate_worker_id(worker_id)
    with transaction.atomic(using=using):
        job = (
            Job.objects.using(using)
            .filter(pk=parse_id(job_id), state=JobState.ACTIVE)
            .only("id", "type", "queue", "state", "attempt", "worker_id", "meta")
            .first()
        )
        if job is None:
            return False
        require_holder(job, worker_id)
        # Kept on the job too, so GET /jobs/{id}/progress answers without events stored.
        Job.objects.using(using).filter(pk=job.pk).update(
            last_progress={
                "progress": float(value),
                "message": message,
                "data": data,
                "updated_at": envelope.format_timestamp(timezone.now()),
            }
        )
        events.emit_job(
            "job.progress",
            job,
            using,
            worker_id=job.worker_id,
            attempt=job.attempt,
            progress=float(value),
            progress_percent=round(float(value) * 100, 3),
            progress_message=message,
            data=data,
        )
    return True
