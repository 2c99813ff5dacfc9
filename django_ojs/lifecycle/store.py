"""Row-level helpers shared by the lifecycle operations: lock, check, compare-and-set.

Internal to ``lifecycle``; nothing outside the package imports this module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import F

from django_ojs import states
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import InvalidTransition, JobNotFound, ReservationMismatch
from django_ojs.lifecycle import fairness
from django_ojs.models import Job
from django_ojs.states import JobState

#: The fields that end a reservation, written when an attempt settles.
RELEASE: dict[str, Any] = dict.fromkeys(states.RELEASED_FIELDS)


def db(using: str | None) -> str:
    return using or settings.DATABASE


def backend(using: str | None = None) -> str:
    """Which database holds the job store (``postgresql``, ``sqlite``): its driver's name."""
    return get_driver(db(using)).name


def parse_id(job_id: Any) -> uuid.UUID:
    if isinstance(job_id, uuid.UUID):
        return job_id
    try:
        return uuid.UUID(str(job_id))
    except (ValueError, TypeError, AttributeError):
        raise JobNotFound(job_id) from None


def locked(job_id: Any, using: str) -> Job:
    """Load a job with a row lock (PostgreSQL; SQLite holds the database write lock)."""
    rows = get_driver(using).lock_rows(
        Job.objects.using(using).filter(pk=parse_id(job_id)), limit=1, skip_locked=False
    )
    if not rows:
        raise JobNotFound(job_id)
    return rows[0]


def require(job: Job, operation: str) -> None:
    """Raise :class:`InvalidTransition` unless ``operation`` may start from ``job.state``."""
    allowed = states.allowed_from(operation)
    if job.state not in allowed:
        raise InvalidTransition(job.id, job.state, operation, allowed)


def require_holder(job: Job, worker_id: str | None) -> None:
    """OJS worker protocol §5.6: only the reservation holder may ACK or FAIL."""
    if worker_id and job.worker_id and job.worker_id != worker_id:
        raise ReservationMismatch(job.id, worker_id, job.worker_id)


def cas(job: Job, operation: str, using: str, **fields: Any) -> Job:
    """Compare-and-set: write ``fields`` only if the row still has the state we read.

    ``UPDATE … WHERE id = ? AND state = ? AND attempt = ?`` (River's
    ``JobSetStateIfRunning``). Zero rows means someone else moved the job first: that is
    an invalid transition from the caller's point of view (OJS core §6.3).
    """
    target = fields.get("state")
    if target is not None and target != job.state and not states.can_transition(job.state, target):
        raise InvalidTransition(job.id, job.state, operation, {job.state})
    if target == JobState.AVAILABLE and job.state != JobState.AVAILABLE:
        # A tenant's job takes its turn now (fair scheduling), not its old one.
        turn = fairness.next_turn(fields.get("queue", job.queue), job.tenant, job.priority, using)
        if turn is not None:
            fields = {**fields, "vtime": turn}
    changed = get_driver(using).update_if(
        job.pk, state=job.state, attempt=job.attempt, fields=fields
    )
    if not changed:
        current = Job.objects.using(using).filter(pk=job.pk).values_list("state", flat=True).first()
        if current is None:
            raise JobNotFound(job.pk)
        raise InvalidTransition(job.id, current, operation, states.allowed_from(operation))
    for name, value in fields.items():
        if not isinstance(value, F):
            setattr(job, name, value)
    return job


def trim_history(errors: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the newest ``OJS_ERROR_HISTORY_LIMIT`` error entries."""
    errors = list(errors)
    limit = settings.ERROR_HISTORY_LIMIT
    return errors[-limit:] if limit > 0 else errors
