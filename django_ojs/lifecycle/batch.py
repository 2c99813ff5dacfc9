"""Batched outcomes for in-process workers: ACK many attempts in one conditional UPDATE.

The semantics of :func:`~django_ojs.lifecycle.settle.ack`, for a batch of one worker's
attempts: a job completes only if it is still ``active``, reserved by that worker and on
the same attempt (worker protocol §5.6); the others are left alone and not returned.
Events are written in the same transaction. PostgreSQL does it in one statement (driver).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.db.models import Case, JSONField, Value, When
from django.utils import timezone

from django_ojs import envelope, failure, signals
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import events
from django_ojs.lifecycle.settle import settle_failure
from django_ojs.lifecycle.store import RELEASE, attempt_duration_ms, db, parse_id
from django_ojs.models import Job
from django_ojs.states import JobState

#: Largest batch one call writes (bigger inputs are split).
MAX_BATCH = 1000


def ack_many(
    items: Sequence[tuple[Any, int, Any]], *, worker_id: str, using: str | None = None
) -> list[uuid.UUID]:
    """Complete several active attempts of ``worker_id``; return the ids completed.

    ``items`` are ``(job_id, attempt, result)``. An item whose job is no longer active,
    is reserved by another worker or is on another attempt (rescued, cancelled, timed out
    meanwhile) is skipped: its late outcome is ignored, as :func:`ack` would refuse it.
    Results must be JSON-native (:class:`ValidationError` otherwise, nothing written).
    """
    using = db(using)
    if not worker_id:
        raise ValueError("ack_many needs the worker_id that holds the reservations")
    checked = [
        (parse_id(job_id), int(attempt), envelope.check_json(result, "result"))
        for job_id, attempt, result in items
    ]
    done: list[uuid.UUID] = []
    for start in range(0, len(checked), MAX_BATCH):
        done.extend(_ack_batch(checked[start : start + MAX_BATCH], worker_id, using))
    return done


def _ack_batch(
    items: list[tuple[uuid.UUID, int, Any]], worker_id: str, using: str
) -> list[uuid.UUID]:
    if not items:
        return []
    now = timezone.now()
    # A driver may complete a batch in one statement (PostgreSQL). It writes the event
    # rows itself, so it is not used when someone listens to the event signal.
    fast = getattr(get_driver(using), "ack_many", None)
    if fast is not None and not signals.event_emitted.has_listeners():
        # One statement is atomic on its own: no BEGIN/COMMIT round trips needed.
        return fast(
            items,
            worker_id=worker_id,
            now=now,
            source=settings.EVENT_SOURCE,
            store_events=settings.STORE_EVENTS,
        )
    return _ack_batch_orm(items, worker_id, using, now)


def _ack_batch_orm(
    items: list[tuple[uuid.UUID, int, Any]], worker_id: str, using: str, now: Any
) -> list[uuid.UUID]:
    wanted = {job_id: (attempt, result) for job_id, attempt, result in items}
    jobs = Job.objects.using(using)
    with transaction.atomic(using=using):
        # Rows are locked (PostgreSQL) or the IMMEDIATE transaction holds SQLite's write
        # lock, so the attempts read here are still current when the UPDATE runs.
        current = list(
            jobs.filter(id__in=list(wanted), state=JobState.ACTIVE, worker_id=worker_id)
            .select_for_update()
            .only("id", "type", "queue", "state", "attempt", "started_at", "meta")
        )
        owned = [job for job in current if job.attempt == wanted[job.id][0]]
        if not owned:
            return []
        with_result = [job for job in owned if wanted[job.id][1] is not None]
        without = [job.id for job in owned if wanted[job.id][1] is None]
        common = {"state": JobState.COMPLETED, "completed_at": now, "error": None, **RELEASE}
        guard = {"state": JobState.ACTIVE, "worker_id": worker_id}
        if without:
            jobs.filter(id__in=without, **guard).update(result=None, **common)
        if with_result:
            jobs.filter(id__in=[job.id for job in with_result], **guard).update(
                result=Case(
                    *[
                        When(id=job.id, then=Value(wanted[job.id][1], output_field=JSONField()))
                        for job in with_result
                    ],
                    output_field=JSONField(),
                ),
                **common,
            )
        items_ = []
        for job in owned:
            result = wanted[job.id][1]
            job.state = JobState.COMPLETED
            job.result = result
            items_.append(
                (
                    "job.completed",
                    job,
                    {
                        "attempt": job.attempt,
                        "duration_ms": attempt_duration_ms(job, now),
                        "result": result,
                    },
                )
            )
        events.emit_many(items_, using, now)
    return [job.id for job in owned]


def fail_many(
    items: Sequence[tuple[Any, int, Any, bool]], *, worker_id: str, using: str | None = None
) -> list[uuid.UUID]:
    """Report several failed attempts of ``worker_id``; return the ids that were settled.

    ``items`` are ``(job_id, attempt, error, requeue)``; each goes through the retry
    policy as :func:`fail` does. Attempts that are no longer this worker's (rescued,
    cancelled, timed out meanwhile) are skipped. An execution timeout (error type
    ``timeout``) also emits ``job.timeout`` (timeouts §11.1).
    """
    using = db(using)
    if not worker_id:
        raise ValueError("fail_many needs the worker_id that holds the reservations")
    wanted = {
        parse_id(job_id): (int(attempt), error, requeue)
        for job_id, attempt, error, requeue in items
    }
    done: list[uuid.UUID] = []
    if not wanted:
        return done
    now = timezone.now()
    with transaction.atomic(using=using):
        jobs = list(
            Job.objects.using(using)
            .filter(id__in=list(wanted), state=JobState.ACTIVE, worker_id=worker_id)
            .select_for_update()
        )
        for job in jobs:
            attempt, error, requeue = wanted[job.id]
            if job.attempt != attempt:
                continue
            try:
                entry = failure.entry(error, attempt=job.attempt, now=now)
            except ValidationError as exc:
                entry = failure.entry(
                    {"type": "invalid_error", "message": f"Unusable error report: {exc.message}"},
                    attempt=job.attempt,
                    now=now,
                )
            settle_failure(job, entry, using, now, requeue=requeue)
            done.append(job.id)
    return done
