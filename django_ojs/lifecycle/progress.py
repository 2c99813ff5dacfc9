"""Progress of a running attempt (OJS progress extension, events ``job.progress``).

Progress is recorded as a ``job.progress`` event; it needs no column and never changes
state. Resetting the stall clock is BEAT's job (``workers.beat``), which callers also send.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_ojs import envelope
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import events
from django_ojs.lifecycle.store import db, parse_id, require_holder
from django_ojs.models import Job
from django_ojs.states import JobState


def report_progress(
    job_id: Any,
    value: float,
    *,
    message: str | None = None,
    data: dict[str, Any] | None = None,
    worker_id: str | None = None,
    using: str | None = None,
) -> bool:
    """Record that an active job is ``value`` (0.0-1.0) done; False if it is not active.

    The event carries ``progress`` (0-1), ``progress_percent`` (0-100, events §10.10),
    ``progress_message`` and optional structured ``data``. Raises
    :class:`ReservationMismatch` when ``worker_id`` does not hold the job.
    """
    using = db(using)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValidationError("progress must be a number from 0 to 1", field="progress")
    if message is not None and not isinstance(message, str):
        raise ValidationError("progress message must be a string", field="message")
    if data is not None:
        if not isinstance(data, dict):
            raise ValidationError("progress data must be an object", field="data")
        data = envelope.check_json(data, "data")
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
