"""Workflows (OJS workflows §4-§9): chain, group and batch, and their exact counters.

Every job of a workflow exists from the moment the workflow is created, so the workflow
is one insert and its graph is always complete:

* group and batch members are ``available`` at once (§5.3, §6.4);
* chain step 0 is ``available``, later steps wait in ``pending`` and are released one at
  a time, with ``parent_results``, when the step before completes (§4.3, §7.2);
* batch callbacks wait in ``pending`` with ``workflow_step = -1``; when the last member
  finishes, the callbacks §6.5 selects are released and the others cancelled.

:func:`member_finished` runs in the transaction that makes a member terminal (ACK, a
FAIL with no retry left, a discard, a cancel, the reaper's expiry). It locks the
workflow row first, so the transitions of one workflow's members are serialised on that
row: exactly one transaction sees the last member finish, and a callback leaves
``pending`` once (a second release would be a refused compare-and-set anyway).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import states
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import InvalidTransition, ValidationError, WorkflowNotFound
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.rows import build_spec, check_types, job_row
from django_ojs.lifecycle.store import RELEASE, cas, db
from django_ojs.models import Job, Workflow
from django_ojs.policy import default_retry_policy
from django_ojs.retry import RetryPolicy
from django_ojs.states import JobState

KINDS = ("chain", "group", "batch")
CALLBACKS = ("on_complete", "on_success", "on_failure")
#: ``workflow_step`` of a batch callback job.
CALLBACK_STEP = -1
#: Workflow states (§8.1) and the transitions §8.2 allows.
TERMINAL = frozenset({"completed", "failed", "cancelled"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"running", "cancelled"}),
    "running": frozenset({"completed", "failed", "cancelled"}),
    # An operator's "retry failed step" re-opens a failed workflow (spec-readings).
    "failed": frozenset({"running"}),
    "completed": frozenset(),
    "cancelled": frozenset(),
}


def create(
    kind: str,
    jobs: Sequence[JobSpec],
    *,
    name: str = "",
    callbacks: Mapping[str, JobSpec] | None = None,
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Create a workflow and all its jobs, in the caller's transaction (all or nothing).

    ``jobs`` are the chain's steps in order, or the group's/batch's members. ``callbacks``
    (batch only) maps ``on_complete``/``on_success``/``on_failure`` to a job spec.
    """
    using = db(using)
    if kind not in KINDS:
        raise ValidationError(
            f"type must be one of {', '.join(KINDS)}", field="type", details={"type": kind}
        )
    jobs = list(jobs)
    field = "steps" if kind == "chain" else "jobs"
    if not jobs:
        raise ValidationError(f"A {kind} needs at least one job in '{field}'.", field=field)
    callbacks = dict(callbacks or {})
    unknown = sorted(set(callbacks) - set(CALLBACKS))
    if unknown:
        raise ValidationError(f"Unknown callback '{unknown[0]}'.", field=f"callbacks.{unknown[0]}")
    if kind == "batch" and not callbacks:
        raise ValidationError(
            "A batch needs at least one of on_complete, on_success, on_failure (§6.3).",
            field="callbacks",
        )
    if kind != "batch" and callbacks:
        raise ValidationError(f"A {kind} has no callbacks; use a batch.", field="callbacks")
    ordered = [(name_, callbacks[name_]) for name_ in CALLBACKS if name_ in callbacks]
    check_types([*jobs, *(spec for _, spec in ordered)])
    now = timezone.now()
    default_max_attempts = default_retry_policy().max_attempts
    with transaction.atomic(using=using):
        workflow = Workflow(
            kind=kind,
            name=name or "",
            state="running",
            total=len(jobs),
            metadata=dict(metadata or {}),
            created_at=now,
            started_at=now,
        )
        rows: list[Job] = []
        for index, spec in enumerate(jobs):
            waiting = kind == "chain" and index > 0
            row = job_row(
                replace(spec, pending=True) if waiting else spec, now, default_max_attempts
            )
            row.workflow_id = workflow.id
            row.workflow_step = index
            row.parent_results = [] if kind == "chain" and index == 0 else None
            rows.append(row)
        for callback, spec in ordered:
            row = job_row(replace(spec, pending=True), now, default_max_attempts)
            row.workflow_id = workflow.id
            row.workflow_step = CALLBACK_STEP
            rows.append(row)
            workflow.callbacks[callback] = str(row.id)
        workflow.save(using=using, force_insert=True)
        written = get_driver(using).push_many(
            rows,
            available={row.queue for row in rows if row.state == JobState.AVAILABLE},
            now=now,
            events=events.mode(),
            source=settings.EVENT_SOURCE,
        )
        _emit(workflow, "workflow.started", using, jobs_total=workflow.total)
    events.signal(written, using)
    for row in rows:
        row._state.adding = False
        row._state.db = using
    return workflow


def get(workflow_id: Any, *, using: str | None = None) -> Workflow:
    """The workflow ``workflow_id``; raises :class:`WorkflowNotFound`."""
    workflow = Workflow.objects.using(db(using)).filter(pk=_parse(workflow_id)).first()
    if workflow is None:
        raise WorkflowNotFound(workflow_id)
    return workflow


def cancel(
    workflow_id: Any,
    *,
    reason: str | None = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> Workflow:
    """Cancel a running workflow and every job of it that has not finished (§11.3).

    Cancelling a cancelled workflow changes nothing; a completed or failed one raises
    :class:`InvalidTransition`.
    """
    using = db(using)
    now = timezone.now()
    with transaction.atomic(using=using):
        # Jobs before the workflow row: the order member_finished takes them in.
        jobs = get_driver(using).lock_rows(
            Job.objects.using(using).filter(
                workflow_id=_parse(workflow_id), state__in=states.NON_TERMINAL_STATES
            ),
            limit=100_000,
            skip_locked=False,
        )
        workflow = _locked(workflow_id, using)
        audit.record(
            actor, "workflow.cancel", using, job_ids=[job.id for job in jobs], reason=reason,
            workflow_id=str(workflow.id), previous_state=workflow.state,
        )  # fmt: skip
        if workflow.state == "cancelled":
            return workflow
        _require(workflow, "cancelled")
        members = 0
        for job in jobs:
            previous = job.state
            cas(job, "cancel", using, state=JobState.CANCELLED, cancelled_at=now, **RELEASE)
            events.emit_job(
                "job.cancelled", job, using, now, previous_state=previous,
                cancelled_by=audit.by(None, actor), reason=reason or "workflow cancelled",
            )  # fmt: skip
            if job.workflow_step is not None and job.workflow_step >= 0:
                members += 1
        workflow.cancelled += members
        _finish(workflow, "cancelled", using, now, reason=reason)
    return workflow


def member_finished(job: Job, using: str, now: datetime) -> None:
    """Account for ``job`` (of a workflow) having just become terminal, in its transaction."""
    if job.workflow_id is None:
        return
    workflow = _locked(job.workflow_id, using)
    if job.workflow_step is None or job.workflow_step < 0:
        _callback_finished(workflow, job, using, now)
        return
    if workflow.state in TERMINAL:
        return  # a cancelled workflow counted its jobs when it cancelled them
    if job.state == JobState.COMPLETED:
        workflow.completed += 1
        _emit(
            workflow, "workflow.step_completed", using, job_id=str(job.id),
            step=job.workflow_step, jobs_completed=workflow.completed,
        )  # fmt: skip
    elif job.state == JobState.CANCELLED:
        workflow.cancelled += 1
        _record_failure(workflow, job)
    else:
        workflow.failed += 1
        _record_failure(workflow, job)
    if workflow.kind == "chain":
        _advance_chain(workflow, job, using, now)
    elif workflow.finished >= workflow.total:
        if workflow.kind == "group":
            _finish(workflow, "completed" if _all_succeeded(workflow) else "failed", using, now)
        else:
            _fire_callbacks(workflow, using, now)
    else:
        _save(workflow, using)


def resume(job: Job, using: str, now: datetime) -> None:
    """A failed member went back to work (dead-letter retry): undo its count, re-open.

    A chain gets fresh ``pending`` copies of the steps its failure cancelled (the
    cancelled rows stay, as history), so it carries on from the retried step.
    """
    if job.workflow_id is None or job.workflow_step is None or job.workflow_step < 0:
        return
    workflow = _locked(job.workflow_id, using)
    if workflow.state not in {"running", "failed"} or workflow.fired:
        # Its outcome is final (cancelled, or callbacks already ran on it): a retried
        # member would count twice. The caller's transaction (the retry) rolls back.
        why = "its callbacks have run" if workflow.fired else f"it is {workflow.state}"
        raise InvalidTransition(
            job.id, "discarded", "retry a workflow step", {"failed", "running"},
            message=f"Job '{job.id}' belongs to workflow '{workflow.id}' and {why}: "
            "it cannot be retried.",
        )  # fmt: skip
    if workflow.kind == "chain":
        if workflow.state != "failed":
            return
        newest: dict[int, Job] = {}  # per step, its newest row (earlier resumes left rows)
        for row in (
            Job.objects.using(using)
            .filter(workflow_id=workflow.id, workflow_step__gt=job.workflow_step)
            .order_by("workflow_step", "id")
        ):
            newest[row.workflow_step] = row  # type: ignore[index]
        default_max_attempts = default_retry_policy().max_attempts
        copies = []
        for step in newest.values():
            if step.state != JobState.CANCELLED:
                continue
            copy = job_row(_spec_of(step), now, default_max_attempts)
            copy.workflow_id = workflow.id
            copy.workflow_step = step.workflow_step
            copies.append(copy)
            workflow.cancelled = max(0, workflow.cancelled - 1)
        if copies:
            written = get_driver(using).push_many(
                copies, available=set(), now=now, events=events.mode(),
                source=settings.EVENT_SOURCE,
            )  # fmt: skip
            events.signal(written, using)
    workflow.failed = max(0, workflow.failed - 1)
    error = dict(workflow.error or {})
    error["failed_job_ids"] = [i for i in error.get("failed_job_ids", []) if i != str(job.id)]
    error["errors"] = [e for e in error.get("errors", []) if e.get("job_id") != str(job.id)]
    workflow.error = error if error["failed_job_ids"] else None
    if workflow.state == "failed":
        _transition(workflow, "running")
        workflow.finished_at = None
    _save(workflow, using)


# ---------------------------------------------------------------------- internals


def _spec_of(job: Job) -> JobSpec:
    """The spec a ``pending`` copy of ``job`` is created from (a resumed chain's step)."""
    return JobSpec(
        type=job.type,
        args=job.args,
        queue=job.queue,
        meta=job.meta,
        priority=job.priority,
        pending=True,
        retry=RetryPolicy.from_wire(job.retry) if job.retry else None,
        schema=job.schema,
        tags=job.tags,
        timeout_ms=job.timeout_ms,
        visibility_timeout_ms=job.visibility_timeout_ms,
        total_timeout_ms=job.total_timeout_ms,
        enqueue_ttl_ms=job.enqueue_ttl_ms,
        grace_period_ms=job.grace_period_ms,
        heartbeat_timeout_ms=job.heartbeat_timeout_ms,
        extra=job.extra,
    )


def _advance_chain(workflow: Workflow, job: Job, using: str, now: datetime) -> None:
    # Steps after this one that are still to run (a resumed chain also has the cancelled
    # rows of its earlier failure: history, left alone).
    later = list(
        Job.objects.using(using)
        .filter(
            workflow_id=workflow.id,
            workflow_step__gt=job.workflow_step,
            state__in=states.NON_TERMINAL_STATES,
        )
        .order_by("workflow_step", "id")
    )
    if job.state == JobState.COMPLETED:
        if not later:
            _finish(workflow, "completed", using, now)
            return
        step = later[0]
        if step.state == JobState.PENDING:
            parents = [*(job.parent_results or []), job.result]
            cas(
                step, "activate", using, state=JobState.AVAILABLE, enqueued_at=now,
                parent_results=parents,
            )  # fmt: skip
            events.emit_job("job.enqueued", step, using, now, priority=step.priority)
            get_driver(using).after_push({step.queue}, {step.queue})
        _save(workflow, using)
        return
    # §9.2: the chain fails, later steps are cancelled and never enqueued.
    for step in later:
        if step.state in states.NON_TERMINAL_STATES:
            previous = step.state
            cas(step, "cancel", using, state=JobState.CANCELLED, cancelled_at=now, **RELEASE)
            events.emit_job(
                "job.cancelled", step, using, now, previous_state=previous,
                cancelled_by="workflow", reason=f"chain step {job.workflow_step} failed",
            )  # fmt: skip
            workflow.cancelled += 1
    _finish(workflow, "failed", using, now)


def _fire_callbacks(workflow: Workflow, using: str, now: datetime) -> None:
    """§6.5: release the callbacks the outcome selects, cancel the others."""
    succeeded = _all_succeeded(workflow)
    wanted = {"on_complete", "on_success" if succeeded else "on_failure"}
    members = list(
        Job.objects.using(using)
        .filter(workflow_id=workflow.id, workflow_step__gte=0)
        .order_by("workflow_step")
        .values_list("result", flat=True)
    )
    by_id = {
        job.id: job
        for job in Job.objects.using(using).filter(
            workflow_id=workflow.id, workflow_step=CALLBACK_STEP
        )
    }
    fired: list[str] = []
    for name, job_id in workflow.callbacks.items():
        job = next((j for j in by_id.values() if str(j.id) == job_id), None)
        if job is None or job.state != JobState.PENDING:
            continue
        if name in wanted:
            cas(
                job, "activate", using, state=JobState.AVAILABLE, enqueued_at=now,
                parent_results=members,
            )  # fmt: skip
            events.emit_job("job.enqueued", job, using, now, priority=job.priority)
            get_driver(using).after_push({job.queue}, {job.queue})
            fired.append(name)
        else:
            cas(job, "cancel", using, state=JobState.CANCELLED, cancelled_at=now, **RELEASE)
            events.emit_job(
                "job.cancelled", job, using, now, previous_state="pending",
                cancelled_by="workflow", reason=f"{name} not selected (§6.5)",
            )  # fmt: skip
    workflow.fired = fired
    if not fired:
        # Only on_success was defined and a member failed: nothing left to run.
        _finish(workflow, "failed", using, now)
    else:
        _save(workflow, using)


def _callback_finished(workflow: Workflow, job: Job, using: str, now: datetime) -> None:
    if workflow.state in TERMINAL or not workflow.fired:
        return  # an unselected callback being cancelled, or a cancelled workflow
    name = next((n for n, i in workflow.callbacks.items() if i == str(job.id)), "callback")
    if job.state != JobState.COMPLETED:
        # §9.5: a failed callback fails the batch, recorded with its callback type.
        _record_failure(workflow, job, callback=name)
    fired_ids = [workflow.callbacks[n] for n in workflow.fired]
    outcomes = dict(Job.objects.using(using).filter(id__in=fired_ids).values_list("id", "state"))
    if all(state in states.TERMINAL_STATES for state in outcomes.values()):
        ok = all(state == JobState.COMPLETED for state in outcomes.values())
        _finish(workflow, "completed" if ok else "failed", using, now)
    else:
        _save(workflow, using)


def _all_succeeded(workflow: Workflow) -> bool:
    return workflow.failed == 0 and workflow.cancelled == 0


def _record_failure(workflow: Workflow, job: Job, *, callback: str | None = None) -> None:
    """§9.6: ``failed_step_index`` (chain), ``failed_job_ids`` and ``errors``."""
    error = dict(workflow.error or {"failed_job_ids": [], "errors": []})
    error["failed_job_ids"] = [*error.get("failed_job_ids", []), str(job.id)]
    last = job.error or {}
    entry = {
        "job_id": str(job.id),
        "code": last.get("code") or ("cancelled" if job.state == JobState.CANCELLED else "failed"),
        "message": last.get("message") or f"job {job.state}",
        "attempt": job.attempt,
    }
    if callback:
        entry["callback"] = callback
    error["errors"] = [*error.get("errors", []), entry]
    if workflow.kind == "chain" and "failed_step_index" not in error:
        error["failed_step_index"] = job.workflow_step
    workflow.error = error


def _finish(workflow: Workflow, state: str, using: str, now: datetime, **data: Any) -> None:
    _transition(workflow, state)
    workflow.finished_at = now
    _save(workflow, using)
    kind = {"completed": "workflow.completed", "failed": "workflow.failed"}.get(
        state, "workflow.cancelled"
    )
    _emit(
        workflow, kind, using, state=state, jobs_completed=workflow.completed,
        jobs_failed=workflow.failed, jobs_cancelled=workflow.cancelled, error=workflow.error,
        **data,
    )  # fmt: skip


def _transition(workflow: Workflow, state: str) -> None:
    _require(workflow, state)
    workflow.state = state


def _require(workflow: Workflow, state: str) -> None:
    """§8.2: refuse any workflow transition the table does not list."""
    if state not in TRANSITIONS.get(workflow.state, frozenset()):
        allowed = {s for s, targets in TRANSITIONS.items() if state in targets}
        raise InvalidTransition(
            workflow.id,
            workflow.state,
            "cancel workflow" if state == "cancelled" else f"move workflow to {state}",
            allowed,
            message=f"Workflow '{workflow.id}' is {workflow.state}: it cannot become {state}.",
        )


def _save(workflow: Workflow, using: str) -> None:
    Workflow.objects.using(using).filter(pk=workflow.pk).update(
        state=workflow.state,
        completed=workflow.completed,
        failed=workflow.failed,
        cancelled=workflow.cancelled,
        fired=workflow.fired,
        error=workflow.error,
        finished_at=workflow.finished_at,
    )


def _locked(workflow_id: Any, using: str) -> Workflow:
    workflow = (
        Workflow.objects.using(using).select_for_update().filter(pk=_parse(workflow_id)).first()
    )
    if workflow is None:
        raise WorkflowNotFound(workflow_id)
    return workflow


def _parse(workflow_id: Any) -> Any:
    if isinstance(workflow_id, uuid.UUID):
        return workflow_id
    try:
        return uuid.UUID(str(workflow_id))
    except ValueError:
        raise WorkflowNotFound(workflow_id) from None


def _emit(workflow: Workflow, kind: str, using: str, **data: Any) -> None:
    events.emit_other(
        kind, f"workflow:{workflow.id}", using, workflow_id=str(workflow.id),
        workflow_type=workflow.kind, name=workflow.name or None, **data,
    )  # fmt: skip


def job_spec(type: str, args: Any = (), **options: Any) -> JobSpec:
    """A validated job spec with :func:`~django_ojs.enqueue`'s options (a workflow step)."""
    return build_spec(type, args, options)
