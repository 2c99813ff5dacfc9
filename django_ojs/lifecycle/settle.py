"""ACK, FAIL, CANCEL, ACTIVATE and the dead-letter operations (OJS core §7.3-§7.6).

Each operation locks the row, checks the state table, then writes with a compare-and-set.
``settle_failure`` is the one place a failed attempt is resolved (FAIL, timeouts, stalls,
lost reservations, dead workers, shutdown).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import failure, retry, states, validation
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import Completion, get_driver
from django_ojs.exceptions import InvalidTransition, JobNotFound, QueueNotAllowed, ValidationError
from django_ojs.lifecycle import audit, events, workflows
from django_ojs.lifecycle.store import (
    RELEASE,
    cas,
    db,
    locked,
    parse_id,
    require,
    require_holder,
    trim_history,
)
from django_ojs.models import Job
from django_ojs.policy import effective, elapsed_ms, ms_delta, retry_policy
from django_ojs.states import JobState
from django_ojs.validation import validate_worker_id


def ack(
    job_id: Any,
    result: Any = None,
    *,
    worker_id: str | None = None,
    using: str | None = None,
    fields: Sequence[str] | None = None,
    queues: Sequence[str] | None = None,
) -> Job:
    """Complete an active job, storing ``result`` (any JSON value).

    Raises :class:`InvalidTransition` unless the job is ``active``, and
    :class:`ReservationMismatch` when ``worker_id`` is not the reservation holder.
    ``fields`` names the columns the returned job carries (``id`` always; the others are
    loaded on access); ``None``: all of them. ``queues`` (names or ``prefix*``): the job
    must be in one of them, else :class:`QueueNotAllowed`, whatever its state.
    """
    using = db(using)
    worker_id = validate_worker_id(worker_id)
    result = validation.check_json(result, "result")
    now = timezone.now()
    # The happy path is one statement on PostgreSQL. When no row qualifies, the locked
    # path below says precisely why (not found, not active, another worker's job).
    # A workflow member does not qualify there: it completes below, in the transaction
    # that also moves its workflow (counters, next chain step, callbacks).
    done = _complete(
        job_id, result, worker_id, using, now, without_workflow=True, fields=fields, queues=queues
    )
    if done is not None:
        return done
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        if queues is not None and not validation.name_allowed(job.queue, queues):
            raise QueueNotAllowed(job.queue)
        require(job, "ack")
        require_holder(job, worker_id)
        done = _complete(job.id, result, worker_id, using, now, without_workflow=False)
        if done is None:  # moved on between the two statements (cannot while locked)
            raise InvalidTransition(job.id, job.state, "ack", states.allowed_from("ack"))
        workflows.member_finished(done, using, now)
    return done


def _complete(
    job_id: Any,
    result: Any,
    worker_id: str | None,
    using: str,
    now: datetime,
    *,
    without_workflow: bool,
    fields: Sequence[str] | None = None,
    queues: Sequence[str] | None = None,
) -> Job | None:
    written = get_driver(using).complete_many(
        [Completion(parse_id(job_id), None, result)],
        worker_id=worker_id,
        now=now,
        events=events.mode(),
        source=settings.EVENT_SOURCE,
        fields=fields,
        without_workflow=without_workflow,
        queues=queues,
    )
    events.signal(written.events, using)
    return written.jobs[0] if written.jobs else None


def fail(
    job_id: Any,
    error: Any,
    *,
    worker_id: str | None = None,
    requeue: bool = False,
    using: str | None = None,
) -> Job:
    """Report a failed attempt of an active job; the retry policy decides what follows.

    ``error`` is ``{code?, type?, message, retryable?, details?, backtrace?}`` or a string.
    The job becomes ``retryable`` (with ``next_attempt_at``) or ``discarded``; with
    ``requeue=True`` it goes straight back to ``available`` (OpenAPI ``requeue``).
    """
    using = db(using)
    worker_id = validate_worker_id(worker_id)
    now = timezone.now()
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        require(job, "fail")
        require_holder(job, worker_id)
        entry = failure.entry(error, attempt=job.attempt, now=now)
        settle_failure(job, entry, using, now, requeue=requeue)
    return job


def settle_failure(
    job: Job,
    entry: dict[str, Any],
    using: str,
    now: datetime,
    *,
    requeue: bool = False,
    extra_events: tuple[str, ...] = (),
    operation: str = "fail",
    force_discard: bool = False,
) -> Job:
    """Record ``entry`` and move an active job to retryable, available or discarded.

    ``requeue`` returns it to ``available`` at once when attempts remain (visibility loss,
    dead worker, shutdown); ``force_discard`` ends it regardless (total timeout).
    """
    policy = retry_policy(job)
    if force_discard:
        decision = retry.Decision(
            "discarded", dead_letter=policy.on_exhaustion == "dead_letter", reason="total_timeout"
        )
    else:
        decision = retry.decide(
            policy,
            job.attempt,
            error_type=entry.get("type"),
            error_code=entry.get("code"),
            retryable=entry.get("retryable"),
        )
        if decision.state == "retryable" and requeue:
            decision = retry.Decision("available")
    # Timeouts §9.1: no retry that could not finish inside the total timeout.
    if (
        decision.state != "discarded"
        and job.deadline_at is not None
        and now + ms_delta(decision.delay_ms + effective(job).timeout_ms) > job.deadline_at
    ):
        decision = retry.Decision(
            "discarded", dead_letter=policy.on_exhaustion == "dead_letter", reason="total_timeout"
        )
    if decision.state == "retryable":
        # Kept with the error so the job still shows its backoff once it is fetched again.
        entry = {**entry, "retry_delay_ms": decision.delay_ms}
    history = trim_history([*(job.errors or []), entry])
    fields: dict[str, Any] = {"error": entry, "errors": history, **RELEASE}
    if decision.state == "retryable":
        fields.update(state=JobState.RETRYABLE, next_attempt_at=now + ms_delta(decision.delay_ms))
    elif decision.state == "available":
        fields.update(state=JobState.AVAILABLE, enqueued_at=now, next_attempt_at=None)
    else:
        fields.update(
            state=JobState.DISCARDED,
            discarded_at=now,
            completed_at=now,
            dead_letter=decision.dead_letter,
            next_attempt_at=None,
        )
    cas(job, operation, using, **fields)

    if entry.get("type") == "timeout" and "job.timeout" not in extra_events:
        # Timeouts §11.1: every execution timeout, found by the reaper or reported by the
        # worker (FAIL, ack_many's fail_many), is also a job.timeout event.
        extra_events = ("job.timeout", *extra_events)
    short = failure.summary(entry)
    items: list[tuple[str, Job, dict[str, Any]]] = [
        (kind, job, {"attempt": job.attempt, "error": short}) for kind in extra_events
    ]
    items.append(
        (
            "job.failed",
            job,
            {
                "attempt": job.attempt,
                "error": short,
                "duration_ms": elapsed_ms(job.started_at, now),
            },
        )
    )
    if decision.state == "retryable":
        items.append(
            (
                "job.retrying",
                job,
                {
                    "attempt": job.attempt,
                    "max_attempts": policy.max_attempts,
                    "next_retry_at": job.next_attempt_at,
                    "retry_delay_ms": decision.delay_ms,
                    "error": short,
                },
            )
        )
    elif decision.state == "discarded":
        items.append(
            (
                "job.discarded",
                job,
                {
                    "total_attempts": job.attempt,
                    "last_error": short,
                    "dead_letter": decision.dead_letter,
                    "reason": decision.reason,
                },
            )
        )
    events.emit_many(items, using, now)
    if decision.state == "available":
        get_driver(using).after_push({job.queue}, {job.queue})
    elif decision.state == "discarded" and job.workflow_id is not None:
        workflows.member_finished(job, using, now)
    job.retry_delay_ms = decision.delay_ms if decision.state == "retryable" else None
    return job


def cancel(
    job_id: Any,
    *,
    reason: str | None = None,
    by: str | None = None,
    idempotent: bool = True,
    actor: Actor | None = None,
    using: str | None = None,
) -> Job:
    """Cancel a job that has not finished (core §7.6).

    Cancelling an already-cancelled job succeeds and changes nothing (core §7.6.4), unless
    ``idempotent=False`` (HTTP binding §9.4: 409 for any terminal job); a completed or
    discarded job raises :class:`InvalidTransition`. An active job is cancelled at once;
    its worker learns it from the next heartbeat reply and a late ACK/FAIL is refused.
    The returned job carries ``previous_state``. With an ``actor``, the audit trail
    records the request (also when the job was already cancelled).
    """
    using = db(using)
    now = timezone.now()
    by = audit.by(by, actor)
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        job.previous_state = job.state
        audit.record(
            actor, "job.cancel", using, job_ids=[job.id], queue=job.queue, reason=reason,
            previous_state=job.previous_state,
        )  # fmt: skip
        if job.state == JobState.CANCELLED and idempotent:
            return job
        require(job, "cancel")
        previous = job.state
        cas(job, "cancel", using, state=JobState.CANCELLED, cancelled_at=now, **RELEASE)
        events.emit_job(
            "job.cancelled",
            job,
            using,
            now,
            previous_state=previous,
            cancelled_by=by,
            reason=reason,
        )
        if job.workflow_id is not None:
            workflows.member_finished(job, using, now)
    return job


def activate(job_id: Any, *, using: str | None = None) -> Job:
    """Release a ``pending`` job: to ``available``, or ``scheduled`` if its time is ahead."""
    using = db(using)
    now = timezone.now()
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        require(job, "activate")
        job.previous_state = job.state
        if job.scheduled_at is not None and job.scheduled_at > now:
            cas(job, "activate", using, state=JobState.SCHEDULED)
            events.emit_job("job.scheduled", job, using, now, scheduled_at=job.scheduled_at)
        else:
            cas(job, "activate", using, state=JobState.AVAILABLE, enqueued_at=now)
            events.emit_job("job.enqueued", job, using, now, priority=job.priority)
            get_driver(using).after_push({job.queue}, {job.queue})
        job.activated_at = now
    return job


def retry_discarded(
    job_id: Any,
    *,
    override: dict[str, Any] | None = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> Job:
    """Manually retry a dead-lettered job: ``discarded → available`` (core §6.3, DLQ §6.3).

    ``attempt`` restarts at 0 and the error history is kept. ``override`` may change
    ``queue``, ``meta`` (merged) and ``retry`` for the new run.
    """
    using = db(using)
    now = timezone.now()
    override = override or {}
    if not isinstance(override, dict):
        raise ValidationError("override must be an object", field="override")
    if "meta" in override:
        if not isinstance(override["meta"], dict):
            raise ValidationError("override.meta must be an object", field="override.meta")
        extra_meta = validation.validate_meta(override["meta"])
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        require(job, "retry_discarded")
        fields: dict[str, Any] = {
            "state": JobState.AVAILABLE,
            "attempt": 0,
            "enqueued_at": now,
            "discarded_at": None,
            "completed_at": None,
            "started_at": None,
            "error": None,
            "dead_letter": False,
            "next_attempt_at": None,
            "worker_id": None,
        }
        if "queue" in override:
            fields["queue"] = validation.validate_queue(override["queue"])
        if "meta" in override:
            fields["meta"] = validation.validate_meta({**(job.meta or {}), **extra_meta})
        if "retry" in override:
            policy = retry.RetryPolicy.from_wire(override["retry"], base=retry_policy(job))
            fields["retry"] = policy.to_wire()
            fields["max_attempts"] = policy.max_attempts
        audit.record(
            actor, "dead_letter.retry", using, job_ids=[job.id], queue=job.queue,
            override=override or None,
        )  # fmt: skip
        cas(job, "retry_discarded", using, **fields)
        events.emit_job("dead_letter.retried", job, using, now)
        if job.workflow_id is not None:
            workflows.resume(job, using, now)
        events.emit_job("job.enqueued", job, using, now, priority=job.priority)
        get_driver(using).after_push({job.queue}, {job.queue})
        job.re_enqueued_at = now
    return job


def delete_discarded(job_id: Any, *, actor: Actor | None = None, using: str | None = None) -> None:
    """Delete a dead-lettered job for good (DLQ §6.4). Raises ``JobNotFound`` otherwise."""
    using = db(using)
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        if job.state != JobState.DISCARDED:
            raise JobNotFound(job_id, f"Job '{job_id}' is not in the dead letter queue.")
        audit.record(actor, "dead_letter.delete", using, job_ids=[job.id], queue=job.queue)
        events.emit_job("dead_letter.deleted", job, using)
        Job.objects.using(using).filter(pk=job.pk, state=JobState.DISCARDED).delete()


def discard(
    job_id: Any,
    *,
    reason: str | None = None,
    by: str | None = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> Job:
    """Operator action: end an unfinished job now as ``discarded`` (into the dead letter).

    The job is marked ``dead_letter`` so it can be inspected and retried later.
    """
    using = db(using)
    now = timezone.now()
    by = audit.by(by, actor)
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        require(job, "discard")
        job.previous_state = job.state
        audit.record(
            actor, "job.discard", using, job_ids=[job.id], queue=job.queue, reason=reason,
            previous_state=job.previous_state,
        )  # fmt: skip
        entry = failure.entry(
            {
                "code": "discarded",
                "type": "discarded",
                "message": reason or "Discarded by an operator",
                "retryable": False,
                "discarded_by": by,
            },
            attempt=job.attempt,
            now=now,
        )
        discard_with(job, entry, using, now, operation="discard", reason="operator", by=by)
    return job


def discard_with(
    job: Job,
    entry: dict[str, Any],
    using: str,
    now: datetime,
    *,
    operation: str,
    reason: str,
    by: str | None = None,
    first: tuple[str, dict[str, Any]] | None = None,
) -> Job:
    """End ``job`` as ``discarded`` now, recording ``entry``; emit ``first`` then job.discarded.

    Operator discards land in the dead letter (``dead_letter=True``); expiry does not.
    """
    cas(
        job,
        operation,
        using,
        state=JobState.DISCARDED,
        discarded_at=now,
        completed_at=now,
        dead_letter=operation == "discard",
        next_attempt_at=None,
        error=entry,
        errors=trim_history([*(job.errors or []), entry]),
        **RELEASE,
    )
    summary = failure.summary(entry)
    discarded = {"total_attempts": job.attempt, "last_error": summary, "reason": reason}
    if by is not None:
        discarded["discarded_by"] = by
    items = [(first[0], job, first[1])] if first else []
    items.append(("job.discarded", job, discarded))
    events.emit_many(items, using, now)
    if job.workflow_id is not None:
        workflows.member_finished(job, using, now)
    return job


def run_now(job_id: Any, *, actor: Actor | None = None, using: str | None = None) -> Job:
    """Operator action: make a ``scheduled`` or ``retryable`` job ``available`` at once."""
    using = db(using)
    now = timezone.now()
    with transaction.atomic(using=using):
        job = locked(job_id, using)
        require(job, "run_now")
        job.previous_state = job.state
        audit.record(
            actor, "job.run_now", using, job_ids=[job.id], queue=job.queue,
            previous_state=job.previous_state,
        )  # fmt: skip
        cas(job, "run_now", using, state=JobState.AVAILABLE, enqueued_at=now, next_attempt_at=None)
        events.emit_job("job.enqueued", job, using, now, priority=job.priority, run_now=True)
        get_driver(using).after_push({job.queue}, {job.queue})
    return job


def purge(job_ids: Any, *, actor: Actor | None = None, using: str | None = None) -> int:
    """Delete finished (completed, cancelled or discarded) jobs; others are left alone.

    Returns how many were deleted. With an ``actor``, the audit trail lists the ids
    actually deleted (no entry when none was).
    """
    using = db(using)
    with transaction.atomic(using=using):
        finished = Job.objects.using(using).filter(
            pk__in=list(job_ids),
            state__in=[JobState.COMPLETED, JobState.CANCELLED, JobState.DISCARDED],
        )
        rows = list(finished.select_for_update().values_list("pk", "queue")) if actor else []
        deleted, _ = finished.delete()
        if rows:
            queues = {queue for _pk, queue in rows}
            audit.record(
                actor, "job.purge", using, job_ids=[pk for pk, _queue in rows],
                queue=queues.pop() if len(queues) == 1 else "",
            )  # fmt: skip
    return deleted


def retry_failed_steps(
    workflow_id: Any, *, actor: Actor | None = None, using: str | None = None
) -> list[Job]:
    """Operator action: send the failed (dead-lettered) steps of a workflow back to work.

    Each goes through the dead-letter retry (``retry_discarded``), which re-opens the
    workflow: counters corrected, state ``failed → running``, and for a chain, fresh
    ``pending`` copies of the steps its failure cancelled. All or nothing.
    """
    using = db(using)
    with transaction.atomic(using=using):
        workflow = workflows.get(workflow_id, using=using)
        # Its own failed steps and those of the workflows nested in it (§10).
        nested, jobs = workflows.tree(workflow, using=using)
        depth = {w.id: w.depth for w in nested}
        failed = sorted(
            (
                job
                for job in jobs
                if job.workflow_step is not None
                and job.workflow_step >= 0
                and job.state == JobState.DISCARDED
            ),
            key=lambda job: (
                depth.get(job.workflow_id, 0) if job.workflow_id else 0,
                job.workflow_step or 0,
                job.id,
            ),
        )
        if not failed:
            raise InvalidTransition(
                workflow.id, workflow.state, "retry failed steps", {"failed", "running"},
                message=f"Workflow '{workflow.id}' has no failed step to retry.",
            )  # fmt: skip
        return [retry_discarded(job.id, actor=actor, using=using) for job in failed]
