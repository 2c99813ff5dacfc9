"""A workflow on the move: members finishing (§4-§9), callbacks (§6.5), nesting
(§10.4), cancelling a tree and re-opening one whose failed member is retried.

Internal to :mod:`django_ojs.lifecycle.workflows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_ojs import states
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import InvalidTransition
from django_ojs.lifecycle import events
from django_ojs.lifecycle.store import RELEASE, cas
from django_ojs.lifecycle.workflows.rows import (
    TERMINAL,
    Node,
    all_succeeded,
    emit,
    is_cancelled,
    is_terminal,
    lock,
    member_results,
    nodes,
    result_of,
    save,
    transition,
)
from django_ojs.lifecycle.workflows.spec import (
    CALLBACK_STEP,
    Build,
    member_inputs,
)
from django_ojs.models import Job, Workflow
from django_ojs.policy import default_retry_policy
from django_ojs.states import JobState


@dataclass(frozen=True)
class Outcome:
    """A member reaching a terminal state: what its workflow needs to know of it."""

    step: int
    state: str  # completed | failed | cancelled
    result: Any
    inputs: list[Any] | None
    failure: dict[str, Any] | None
    #: ``{"job_id": …}`` or ``{"nested_workflow_id": …}``: which member it is.
    member: dict[str, str]
    failed_job_ids: tuple[str, ...] = ()

    @classmethod
    def of_job(cls, job: Job) -> Outcome:
        state = "failed"
        if job.state == JobState.COMPLETED:
            state = "completed"
        elif job.state == JobState.CANCELLED:
            state = "cancelled"
        failure = None
        if state != "completed":
            last = job.error or {}
            failure = {
                "job_id": str(job.id),
                "code": last.get("code") or ("cancelled" if state == "cancelled" else "failed"),
                "message": last.get("message") or f"job {job.state}",
                "attempt": job.attempt,
            }
        return cls(
            job.workflow_step or 0, state, job.result, job.parent_results, failure,
            {"job_id": str(job.id)}, () if state == "completed" else (str(job.id),),
        )  # fmt: skip

    @classmethod
    def of_workflow(cls, workflow: Workflow) -> Outcome:
        failure = None
        failed_ids: tuple[str, ...] = ()
        if workflow.state != "completed":
            inner = workflow.error or {}
            failed_ids = tuple(inner.get("failed_job_ids", []))
            first = (inner.get("errors") or [{}])[0]
            failure = {
                "workflow_id": str(workflow.id),
                "code": "workflow_cancelled"
                if workflow.state == "cancelled"
                else "workflow_failed",
                "message": first.get("message") or f"nested {workflow.kind} {workflow.state}",
                "job_ids": list(failed_ids),
            }
        return cls(
            workflow.parent_step or 0, workflow.state, workflow.result,
            workflow.parent_results, failure, {"nested_workflow_id": str(workflow.id)},
            failed_ids,
        )  # fmt: skip


def member_done(workflow: Workflow, outcome: Outcome, using: str, now: datetime) -> None:
    """Count ``outcome`` in ``workflow`` (locked, running) and move it on."""
    if outcome.state == "completed":
        workflow.completed += 1
        emit(
            workflow, "workflow.step_completed", using, step=outcome.step,
            jobs_completed=workflow.completed, **outcome.member,
        )  # fmt: skip
    elif outcome.state == "cancelled":
        workflow.cancelled += 1
        record_failure(workflow, outcome)
    else:
        workflow.failed += 1
        record_failure(workflow, outcome)
    if workflow.kind == "chain":
        advance_chain(workflow, outcome, using, now)
    elif workflow.finished >= workflow.total:
        if workflow.kind == "group":
            finish(workflow, "completed" if all_succeeded(workflow) else "failed", using, now)
        else:
            fire_callbacks(workflow, using, now)
    else:
        save(workflow, using)


def advance_chain(workflow: Workflow, outcome: Outcome, using: str, now: datetime) -> None:
    # Steps after this one that are still to run (a resumed chain also has the cancelled
    # rows of its earlier failure: history, left alone).
    later = [
        node
        for step, node in nodes(workflow, using).items()
        if step > outcome.step and not is_terminal(node)
    ]
    if outcome.state == "completed":
        if not later:
            finish(workflow, "completed", using, now)
            return
        save(workflow, using)
        start(later[0], [*(outcome.inputs or []), outcome.result], using, now)
        return
    # §9.2: the chain fails, later steps are cancelled and never started.
    reason = f"chain step {outcome.step} failed"
    for node in later:
        cancel_node(node, using, now, reason=reason, by="workflow")
        workflow.cancelled += 1
    finish(workflow, "failed", using, now)


def fire_callbacks(workflow: Workflow, using: str, now: datetime) -> None:
    """§6.5: release the callbacks the outcome selects, cancel the others."""
    succeeded = all_succeeded(workflow)
    wanted = {"on_complete", "on_success" if succeeded else "on_failure"}
    results = member_results(workflow, using)
    by_id = {
        str(job.id): job
        for job in Job.objects.using(using).filter(
            workflow_id=workflow.id, workflow_step=CALLBACK_STEP
        )
    }
    fired: list[str] = []
    for name, job_id in workflow.callbacks.items():
        job = by_id.get(job_id)
        if job is None or job.state != JobState.PENDING:
            continue
        if name in wanted:
            start(job, results, using, now)
            fired.append(name)
        else:
            cancel_node(job, using, now, reason=f"{name} not selected (§6.5)", by="workflow")
    workflow.fired = fired
    if not fired:
        # Only on_success was defined and a member failed: nothing left to run.
        finish(workflow, "failed", using, now)
    else:
        save(workflow, using)


def callback_finished(workflow: Workflow, job: Job, using: str, now: datetime) -> None:
    if workflow.state in TERMINAL or not workflow.fired:
        return  # an unselected callback being cancelled, or a cancelled workflow
    name = next((n for n, i in workflow.callbacks.items() if i == str(job.id)), "callback")
    if job.state != JobState.COMPLETED:
        # §9.5: a failed callback fails the batch, recorded with its callback type.
        record_failure(workflow, Outcome.of_job(job), callback=name)
    fired_ids = [workflow.callbacks[n] for n in workflow.fired]
    outcomes = dict(Job.objects.using(using).filter(id__in=fired_ids).values_list("id", "state"))
    if all(state in states.TERMINAL_STATES for state in outcomes.values()):
        ok = all(state == JobState.COMPLETED for state in outcomes.values())
        finish(workflow, "completed" if ok else "failed", using, now)
    else:
        save(workflow, using)


def start(node: Node, inputs: list[Any], using: str, now: datetime) -> None:
    """Start a waiting member with ``inputs`` as its ``parent_results``."""
    if isinstance(node, Job):
        if node.state != JobState.PENDING:
            return
        cas(
            node, "activate", using, state=JobState.AVAILABLE, enqueued_at=now,
            parent_results=inputs,
        )  # fmt: skip
        events.emit_job("job.enqueued", node, using, now, priority=node.priority)
        get_driver(using).after_push({node.queue}, {node.queue})
        return
    workflow = lock(using, [node.id])[node.id]
    if workflow.state != "pending":
        return
    transition(workflow, "running")
    workflow.started_at = now
    workflow.parent_results = inputs
    save(workflow, using)
    emit(workflow, "workflow.started", using, jobs_total=workflow.total)
    members = list(nodes(workflow, using).values())
    given = member_inputs(workflow.kind, inputs) or []
    for member in members[:1] if workflow.kind == "chain" else members:
        start(member, given, using, now)


def cancel_node(node: Node, using: str, now: datetime, *, reason: str, by: str | None) -> None:
    if isinstance(node, Job):
        if node.state not in states.NON_TERMINAL_STATES:
            return
        previous = node.state
        cas(node, "cancel", using, state=JobState.CANCELLED, cancelled_at=now, **RELEASE)
        events.emit_job(
            "job.cancelled", node, using, now, previous_state=previous, cancelled_by=by,
            reason=reason,
        )  # fmt: skip
        return
    workflow = lock(using, [node.id])[node.id]
    if workflow.state not in TERMINAL:
        cancel_tree(workflow, using, now, reason=reason, by=by)


def cancel_tree(workflow: Workflow, using: str, now: datetime, *, reason: str | None,
                 by: str | None) -> None:  # fmt: skip
    """Cancel ``workflow`` (locked), its unfinished jobs and nested workflows, and count
    each unfinished member as cancelled; its parent is not told (the caller decides)."""
    members = 0
    for job in (
        Job.objects.using(using)
        .filter(workflow_id=workflow.id, state__in=states.NON_TERMINAL_STATES)
        .order_by("id")
    ):
        cancel_node(job, using, now, reason=reason or "workflow cancelled", by=by)
        if job.workflow_step is not None and job.workflow_step >= 0:
            members += 1
    for child in (
        Workflow.objects.using(using)
        .filter(parent_id=workflow.id, state__in=("pending", "running"))
        .order_by("id")
    ):
        cancel_node(child, using, now, reason=reason or "workflow cancelled", by=by)
        members += 1
    workflow.cancelled += members
    finish(workflow, "cancelled", using, now, propagate=False, reason=reason)


def reopen(workflow: Workflow, step: int, member_id: str, using: str, now: datetime) -> None:
    """Undo the failure of member ``step`` (job or nested workflow ``member_id``): it went
    back to work, so it is no longer counted, and a workflow it had failed runs again."""
    if workflow.state not in {"running", "failed"} or workflow.fired:
        # Its outcome is final (cancelled, or callbacks already ran on it): a retried
        # member would count twice. The caller's transaction (the retry) rolls back.
        why = "its callbacks have run" if workflow.fired else f"it is {workflow.state}"
        raise InvalidTransition(
            member_id, "discarded", "retry a workflow step", {"failed", "running"},
            message=f"'{member_id}' belongs to workflow '{workflow.id}' and {why}: "
            "it cannot be retried.",
        )  # fmt: skip
    was_failed = workflow.state == "failed"
    if workflow.kind == "chain":
        if not was_failed:
            return
        copies = Build(now, default_retry_policy().max_attempts)
        for later_step, node in nodes(workflow, using).items():
            if later_step <= step or not is_cancelled(node):
                continue
            copies.clone(node, workflow, using)
            workflow.cancelled = max(0, workflow.cancelled - 1)
        if copies.workflows:
            Workflow.objects.using(using).bulk_create(copies.workflows)
        if copies.jobs:
            written = get_driver(using).push_many(
                [copies.jobs], now=now, events=events.mode(),
                source=settings.EVENT_SOURCE,
            )  # fmt: skip
            events.signal(written, using)
    workflow.failed = max(0, workflow.failed - 1)
    error = dict(workflow.error or {})
    entries = error.get("errors", [])
    ours = [e for e in entries if member_id in (e.get("job_id"), e.get("workflow_id"))]
    gone = {member_id, *(i for e in ours for i in e.get("job_ids", []))}
    error["errors"] = [e for e in entries if e not in ours]
    error["failed_job_ids"] = [i for i in error.get("failed_job_ids", []) if i not in gone]
    workflow.error = error if error["errors"] else None
    if was_failed:
        transition(workflow, "running")
        workflow.finished_at = None
        workflow.result = None
    save(workflow, using)
    if was_failed and workflow.parent_id is not None:
        parent = lock(using, [workflow.parent_id])[workflow.parent_id]
        reopen(parent, workflow.parent_step or 0, str(workflow.id), using, now)


def record_failure(workflow: Workflow, outcome: Outcome, *, callback: str | None = None) -> None:
    """§9.6: ``failed_step_index`` (chain), ``failed_job_ids`` and ``errors``."""
    error = dict(workflow.error or {"failed_job_ids": [], "errors": []})
    error["failed_job_ids"] = [*error.get("failed_job_ids", []), *outcome.failed_job_ids]
    entry = dict(outcome.failure or {})
    if callback:
        entry["callback"] = callback
    elif entry.get("workflow_id"):
        entry["step"] = outcome.step
    error["errors"] = [*error.get("errors", []), entry]
    if workflow.kind == "chain" and "failed_step_index" not in error and not callback:
        error["failed_step_index"] = outcome.step
    workflow.error = error


def finish(
    workflow: Workflow,
    state: str,
    using: str,
    now: datetime,
    *,
    propagate: bool = True,
    **data: Any,
) -> None:
    transition(workflow, state)
    workflow.finished_at = now
    if state == "completed":
        workflow.result = result_of(workflow, using)
    save(workflow, using)
    kind = {"completed": "workflow.completed", "failed": "workflow.failed"}.get(
        state, "workflow.cancelled"
    )
    emit(
        workflow, kind, using, state=state, jobs_completed=workflow.completed,
        jobs_failed=workflow.failed, jobs_cancelled=workflow.cancelled, error=workflow.error,
        **data,
    )  # fmt: skip
    if propagate and workflow.parent_id is not None:
        # §10.4: a nested workflow's terminal state is its outcome as a member.
        parent = lock(using, [workflow.parent_id])[workflow.parent_id]
        if parent.state not in TERMINAL:
            member_done(parent, Outcome.of_workflow(workflow), using, now)
