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
from django.utils import timezone

from django_ojs import failure, validation
from django_ojs.conf import settings
from django_ojs.drivers import Completion, get_driver
from django_ojs.exceptions import NotStorable, ValidationError
from django_ojs.lifecycle import events, workflows
from django_ojs.lifecycle.settle import settle_failure
from django_ojs.lifecycle.store import db, parse_id
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
    Each result is checked on its own: one the store cannot hold (NUL, an unpaired
    surrogate) fails its attempt with ``result_not_storable``, one that is not JSON-native
    with ``invalid_result`` (both not retryable, through :func:`fail_many`), and the other
    items are completed as usual. Those failed attempts are not in the returned list.
    """
    using = db(using)
    if not worker_id:
        raise ValueError("ack_many needs the worker_id that holds the reservations")
    checked: list[tuple[uuid.UUID, int, Any]] = []
    refused: list[tuple[Any, int, Any, bool]] = []
    for job_id, attempt, result in items:
        pk, number = parse_id(job_id), int(attempt)
        try:
            checked.append((pk, number, validation.check_json(result, "result")))
        except NotStorable as exc:
            refused.append((pk, number, failure.result_not_storable(exc.message), False))
        except ValidationError as exc:
            refused.append((pk, number, failure.invalid_result(exc.message), False))
    done: list[uuid.UUID] = []
    for start in range(0, len(checked), MAX_BATCH):
        done.extend(_ack_batch(checked[start : start + MAX_BATCH], worker_id, using))
    if refused:
        fail_many(refused, worker_id=worker_id, using=using)
    return done


def _ack_batch(
    items: list[tuple[uuid.UUID, int, Any]], worker_id: str, using: str
) -> list[uuid.UUID]:
    if not items:
        return []
    # One statement on PostgreSQL, atomic on its own: no BEGIN/COMMIT round trips.
    now = timezone.now()
    completions = [Completion(job_id, attempt, result) for job_id, attempt, result in items]
    driver = get_driver(using)
    written = driver.complete_many(
        completions,
        worker_id=worker_id,
        now=now,
        events=events.mode(),
        source=settings.EVENT_SOURCE,
        fields=("id",),
        without_workflow=True,
    )
    events.signal(written.events, using)
    done = [job.id for job in written.jobs]
    if len(done) == len(completions):
        return done
    # The rest are workflow members (or no longer this worker's): they complete in one
    # transaction with their workflows' counters, next steps and callbacks.
    completed = set(done)
    rest = [c for c in completions if c.job_id not in completed]
    with transaction.atomic(using=using):
        members = driver.complete_many(
            rest,
            worker_id=worker_id,
            now=now,
            events=events.mode(),
            source=settings.EVENT_SOURCE,
            fields=None,
        )
        for job in sorted(members.jobs, key=lambda j: (str(j.workflow_id), j.id)):
            workflows.member_finished(job, using, now)
    events.signal(members.events, using)
    return [*done, *(job.id for job in members.jobs)]


def fail_many(
    items: Sequence[tuple[Any, int, Any, bool]], *, worker_id: str, using: str | None = None
) -> list[uuid.UUID]:
    """Report several failed attempts of ``worker_id``; return the ids that were settled.

    ``items`` are ``(job_id, attempt, error, requeue)``; each goes through the retry
    policy as :func:`fail` does. Attempts that are no longer this worker's (rescued,
    cancelled, timed out meanwhile) are skipped. An execution timeout (error type
    ``timeout``) also emits ``job.timeout`` (timeouts §11.1). Each NUL or unpaired
    surrogate in an error becomes U+FFFD (the report is kept, readable; unlike
    :func:`fail`, which refuses it), and an otherwise unusable report is recorded as
    ``invalid_error``: one item never stops the others.
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
        # Locked by primary key alone, in id order (as a heartbeat locks them); state,
        # reservation and attempt are checked on the locked rows (see lifecycle.beat).
        jobs = get_driver(using).lock_rows(
            Job.objects.using(using).filter(id__in=list(wanted)).order_by("id"),
            limit=len(wanted),
            skip_locked=False,
        )
        for job in jobs:
            attempt, error, requeue = wanted[job.id]
            if job.state != JobState.ACTIVE or job.worker_id != worker_id or job.attempt != attempt:
                continue
            try:
                entry = failure.entry(error, attempt=job.attempt, now=now, sanitize=True)
            except ValidationError as exc:
                entry = failure.entry(
                    {"type": "invalid_error", "message": f"Unusable error report: {exc.message}"},
                    attempt=job.attempt,
                    now=now,
                )
            settle_failure(job, entry, using, now, requeue=requeue)
            done.append(job.id)
    return done
