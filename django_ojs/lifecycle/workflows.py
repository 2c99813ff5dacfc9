"""Workflows (OJS workflows §4-§10): chain, group and batch, nested, with exact counters.

Every job and every nested workflow exists from the moment the outermost workflow is
created, so creating one is a handful of inserts and its graph is always complete:

* group and batch members are started at once (§5.3, §6.4);
* a chain's step 0 is started; later steps wait (a job in ``pending``, a nested workflow
  in state ``pending`` with its own jobs pending) and are started one at a time, with
  ``parent_results``, when the step before completes (§4.3, §7.2);
* batch callbacks wait in ``pending`` with ``workflow_step = -1``; when the last member
  finishes, the callbacks §6.5 selects are released and the others cancelled;
* a nested workflow (§10) is a member like a job: when it reaches a terminal state, that
  state is its outcome as a member of its parent (§10.4), and what it hands on
  (``result``) is its members' results (group, batch) or its last step's (chain).

:func:`member_finished` runs in the transaction that makes a member job terminal (ACK, a
FAIL with no retry left, a discard, a cancel, the reaper's expiry). It locks the
workflow rows from the outermost one down to the job's own (always in that order, so two
transactions never wait for each other), and the transitions of a workflow tree's members
are serialised on those rows: exactly one transaction sees the last member finish, and a
callback or a nested workflow is started once (a second start would be a refused
compare-and-set anyway).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import states
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import MAX_RESULT_TTL, JobSpec
from django_ojs.exceptions import InvalidTransition, ValidationError, WorkflowNotFound
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.rows import build_spec, check_types, job_row, through_middleware
from django_ojs.lifecycle.store import RELEASE, cas, db
from django_ojs.models import Job, Workflow
from django_ojs.policy import default_retry_policy
from django_ojs.retry import RetryPolicy
from django_ojs.states import JobState

KINDS = ("chain", "group", "batch")
CALLBACKS = ("on_complete", "on_success", "on_failure")
#: ``workflow_step`` of a batch callback job.
CALLBACK_STEP = -1
#: Levels of workflows one workflow may have, itself included (§10.2: at least 3).
MAX_DEPTH = 5
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

#: A member of a workflow: one of its jobs, or a nested workflow.
Node = Job | Workflow


@dataclass(frozen=True)
class WorkflowSpec:
    """A workflow not created yet: what :func:`create` writes, and what may be nested.

    ``members`` are a chain's steps in order, or a group's/batch's jobs; each is a job
    spec or another ``WorkflowSpec`` (§10.1: any primitive inside any other).
    """

    kind: str
    members: Sequence[JobSpec | WorkflowSpec]
    callbacks: Mapping[str, JobSpec] = field(default_factory=dict)
    name: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def jobs(self) -> Iterator[JobSpec]:
        """Every job spec of the tree: members, nested members and callbacks."""
        for member in self.members:
            if isinstance(member, WorkflowSpec):
                yield from member.jobs()
            else:
                yield member
        yield from self.callbacks.values()


def create(
    kind: str,
    jobs: Sequence[JobSpec | WorkflowSpec],
    *,
    name: str = "",
    callbacks: Mapping[str, JobSpec] | None = None,
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Create a workflow and all its jobs, in the caller's transaction (all or nothing).

    ``jobs`` are the chain's steps in order, or the group's/batch's members; a member may
    be a :class:`WorkflowSpec` (nesting, up to :data:`MAX_DEPTH` levels). ``callbacks``
    (batch only) maps ``on_complete``/``on_success``/``on_failure`` to a job spec.
    """
    spec = WorkflowSpec(kind, list(jobs), dict(callbacks or {}), name or "", dict(metadata or {}))
    return create_spec(spec, using=using)


def create_spec(spec: WorkflowSpec, *, using: str | None = None) -> Workflow:
    """Create the workflow ``spec`` describes (see :func:`create`)."""
    using = db(using)
    _validate(spec, "", 1)
    check_types(list(spec.jobs()))
    now = timezone.now()
    build = _Build(now, default_retry_policy().max_attempts)
    with transaction.atomic(using=using):
        root = build.workflow(spec, parent=None, step=None, root=None, started=True, inputs=None)
        Workflow.objects.using(using).bulk_create(build.workflows)
        written = get_driver(using).push_many(
            [build.jobs],
            now=now,
            events=events.mode(),
            source=settings.EVENT_SOURCE,
        )
        for workflow in build.workflows:
            if workflow.state == "running":
                _emit(workflow, "workflow.started", using, jobs_total=workflow.total)
    events.signal(written, using)
    for row in [*build.jobs, *build.workflows]:
        row._state.adding = False
        row._state.db = using
    return root


def get(workflow_id: Any, *, using: str | None = None) -> Workflow:
    """The workflow ``workflow_id``; raises :class:`WorkflowNotFound`."""
    workflow = Workflow.objects.using(db(using)).filter(pk=_parse(workflow_id)).first()
    if workflow is None:
        raise WorkflowNotFound(workflow_id)
    return workflow


def tree(workflow: Workflow, *, using: str | None = None) -> tuple[list[Workflow], list[Job]]:
    """``workflow`` and the workflows nested in it (any depth), and all their jobs."""
    using = db(using)
    root_id = workflow.root_id or workflow.id
    family = list(
        Workflow.objects.using(using).filter(pk=root_id)
        | Workflow.objects.using(using).filter(root_id=root_id)
    )
    below = _subtree_ids(workflow.id, family)
    workflows = [w for w in family if w.id in below]
    jobs = list(Job.objects.using(using).filter(workflow_id__in=below).order_by("id"))
    return workflows, jobs


def cancel(
    workflow_id: Any,
    *,
    reason: str | None = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> Workflow:
    """Cancel a workflow, the workflows nested in it and every job of them not finished.

    Cancelling a cancelled workflow changes nothing; a completed or failed one raises
    :class:`InvalidTransition`. A nested workflow cancelled on its own is a cancelled
    member of its parent (§10.4): a chain around it fails, a group records it.
    """
    using = db(using)
    now = timezone.now()
    found = get(workflow_id, using=using)
    with transaction.atomic(using=using):
        family = list(
            Workflow.objects.using(using).filter(pk=found.root_id or found.id)
            | Workflow.objects.using(using).filter(root_id=found.root_id or found.id)
        )
        below = _subtree_ids(found.id, family)
        # Jobs before workflow rows: the order member_finished takes them in.
        jobs = get_driver(using).lock_rows(
            Job.objects.using(using).filter(
                workflow_id__in=below, state__in=states.NON_TERMINAL_STATES
            ),
            limit=1_000_000,
            skip_locked=False,
        )
        locked = _lock(using, [*_path_ids(found, family), *below])
        workflow = locked[found.id]
        audit.record(
            actor, "workflow.cancel", using, job_ids=[job.id for job in jobs], reason=reason,
            workflow_id=str(workflow.id), previous_state=workflow.state,
        )  # fmt: skip
        if workflow.state == "cancelled":
            return workflow
        _require(workflow, "cancelled")
        _cancel_tree(workflow, using, now, reason=reason, by=audit.by(None, actor))
        if workflow.parent_id is not None:
            parent = locked[workflow.parent_id]
            if parent.state not in TERMINAL:
                _member_done(parent, _Outcome.of_workflow(workflow), using, now)
    return workflow


def member_finished(job: Job, using: str, now: datetime) -> None:
    """Account for ``job`` (of a workflow) having just become terminal, in its transaction."""
    if job.workflow_id is None:
        return
    workflow = _lock_path(job.workflow_id, using)
    if job.workflow_step is None or job.workflow_step < 0:
        _callback_finished(workflow, job, using, now)
        return
    if workflow.state in TERMINAL:
        return  # a cancelled workflow counted its jobs when it cancelled them
    _member_done(workflow, _Outcome.of_job(job), using, now)


def resume(job: Job, using: str, now: datetime) -> None:
    """A failed member went back to work (dead-letter retry): undo its count, re-open.

    A chain gets fresh ``pending`` copies of the steps its failure cancelled (the
    cancelled rows stay, as history), so it carries on from the retried step. A nested
    workflow that failed because of this member re-opens too, and so on outwards.
    """
    if job.workflow_id is None or job.workflow_step is None or job.workflow_step < 0:
        return
    workflow = _lock_path(job.workflow_id, using)
    _reopen(workflow, job.workflow_step, str(job.id), using, now)


def job_spec(type: str, args: Any = (), **options: Any) -> JobSpec:
    """A validated job spec with :func:`~django_ojs.enqueue`'s options (a workflow step)."""
    return build_spec(type, args, options)


# ---------------------------------------------------------------------- creation


def _validate(spec: WorkflowSpec, path: str, level: int) -> None:
    """Refuse at creation what could not run (§10.2, §11.1): never half a workflow."""
    at = f"{path}." if path else ""
    if spec.kind not in KINDS:
        raise ValidationError(
            f"type must be one of {', '.join(KINDS)}",
            field=f"{at}type",
            details={"type": spec.kind},
        )
    if level > MAX_DEPTH:
        raise ValidationError(
            f"Workflows nest at most {MAX_DEPTH} levels deep (this one is {level} at "
            f"'{path}'); flatten the innermost levels.",
            field=path or "type",
            details={"max_depth": MAX_DEPTH},
        )
    field_ = "steps" if spec.kind == "chain" else "jobs"
    if not spec.members:
        raise ValidationError(
            f"A {spec.kind} needs at least one job in '{field_}'.", field=f"{at}{field_}"
        )
    unknown = sorted(set(spec.callbacks) - set(CALLBACKS))
    if unknown:
        raise ValidationError(
            f"Unknown callback '{unknown[0]}'.", field=f"{at}callbacks.{unknown[0]}"
        )
    if spec.kind == "batch" and not spec.callbacks:
        raise ValidationError(
            "A batch needs at least one of on_complete, on_success, on_failure (§6.3).",
            field=f"{at}callbacks",
        )
    if spec.kind != "batch" and spec.callbacks:
        raise ValidationError(
            f"A {spec.kind} has no callbacks; use a batch.", field=f"{at}callbacks"
        )
    for index, member in enumerate(spec.members):
        if isinstance(member, WorkflowSpec):
            _validate(member, f"{at}{field_}[{index}]", level + 1)


class _Build:
    """The rows of one workflow tree, built depth first (parents before their members)."""

    def __init__(self, now: datetime, default_max_attempts: int) -> None:
        self.now = now
        self.default_max_attempts = default_max_attempts
        self.workflows: list[Workflow] = []
        self.jobs: list[Job] = []

    def workflow(
        self,
        spec: WorkflowSpec,
        *,
        parent: Workflow | None,
        step: int | None,
        root: Workflow | None,
        started: bool,
        inputs: list[Any] | None,
    ) -> Workflow:
        workflow = Workflow(
            kind=spec.kind,
            name=spec.name or "",
            state="running" if started else "pending",
            total=len(spec.members),
            metadata=dict(spec.metadata or {}),
            created_at=self.now,
            started_at=self.now if started else None,
            parent_id=None if parent is None else parent.id,
            parent_step=step,
            root_id=None if root is None else root.id,
            depth=0 if parent is None else parent.depth + 1,
            parent_results=inputs if started and parent is not None else None,
        )
        self.workflows.append(workflow)
        for index, member in enumerate(spec.members):
            go = started and (spec.kind != "chain" or index == 0)
            given = _member_inputs(spec.kind, inputs) if go else None
            if isinstance(member, WorkflowSpec):
                self.workflow(
                    member,
                    parent=workflow,
                    step=index,
                    root=root or workflow,
                    started=go,
                    inputs=given,
                )
            else:
                row = self.job(member, workflow, index, pending=not go)
                row.parent_results = given
        for callback in CALLBACKS:
            if callback in spec.callbacks:
                row = self.job(spec.callbacks[callback], workflow, CALLBACK_STEP, pending=True)
                workflow.callbacks[callback] = str(row.id)
        return workflow

    def clone(self, node: Node, parent: Workflow, using: str) -> None:
        """A ``pending`` copy of a cancelled member (and of all it holds), for a chain that
        resumes: the cancelled rows stay, as history."""
        if isinstance(node, Job):
            self.job(_spec_of(node), parent, node.workflow_step or 0, pending=True)
            return
        root = Workflow(id=node.root_id) if node.root_id else None
        self.workflow(
            _spec_tree(node, using), parent=parent, step=node.parent_step, root=root,
            started=False, inputs=None,
        )  # fmt: skip

    def job(self, spec: JobSpec, workflow: Workflow, step: int, *, pending: bool) -> Job:
        given = through_middleware(spec)
        if given is None:
            raise ValidationError(
                f"Enqueue middleware dropped a {spec.type!r} job of a {workflow.kind}: a "
                "workflow is created whole or not at all.",
                field="jobs",
            )
        spec = given
        row = job_row(replace(spec, pending=True) if pending else spec, self.now,
                      self.default_max_attempts)  # fmt: skip
        row.workflow_id = workflow.id
        row.workflow_step = step
        self.jobs.append(row)
        return row


def _member_inputs(kind: str, inputs: list[Any] | None) -> list[Any] | None:
    """What a started member sees as ``parent_results``: a chain's first step always a list
    (§7.2), a group's or batch's members what their workflow was given (none at the top)."""
    if kind == "chain":
        return list(inputs or [])
    return inputs


# ---------------------------------------------------------------------- members


@dataclass(frozen=True)
class _Outcome:
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
    def of_job(cls, job: Job) -> _Outcome:
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
    def of_workflow(cls, workflow: Workflow) -> _Outcome:
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


def _member_done(workflow: Workflow, outcome: _Outcome, using: str, now: datetime) -> None:
    """Count ``outcome`` in ``workflow`` (locked, running) and move it on."""
    if outcome.state == "completed":
        workflow.completed += 1
        _emit(
            workflow, "workflow.step_completed", using, step=outcome.step,
            jobs_completed=workflow.completed, **outcome.member,
        )  # fmt: skip
    elif outcome.state == "cancelled":
        workflow.cancelled += 1
        _record_failure(workflow, outcome)
    else:
        workflow.failed += 1
        _record_failure(workflow, outcome)
    if workflow.kind == "chain":
        _advance_chain(workflow, outcome, using, now)
    elif workflow.finished >= workflow.total:
        if workflow.kind == "group":
            _finish(workflow, "completed" if _all_succeeded(workflow) else "failed", using, now)
        else:
            _fire_callbacks(workflow, using, now)
    else:
        _save(workflow, using)


def _advance_chain(workflow: Workflow, outcome: _Outcome, using: str, now: datetime) -> None:
    # Steps after this one that are still to run (a resumed chain also has the cancelled
    # rows of its earlier failure: history, left alone).
    later = [
        node
        for step, node in _nodes(workflow, using).items()
        if step > outcome.step and not _terminal(node)
    ]
    if outcome.state == "completed":
        if not later:
            _finish(workflow, "completed", using, now)
            return
        _save(workflow, using)
        _start(later[0], [*(outcome.inputs or []), outcome.result], using, now)
        return
    # §9.2: the chain fails, later steps are cancelled and never started.
    reason = f"chain step {outcome.step} failed"
    for node in later:
        _cancel_node(node, using, now, reason=reason, by="workflow")
        workflow.cancelled += 1
    _finish(workflow, "failed", using, now)


def _fire_callbacks(workflow: Workflow, using: str, now: datetime) -> None:
    """§6.5: release the callbacks the outcome selects, cancel the others."""
    succeeded = _all_succeeded(workflow)
    wanted = {"on_complete", "on_success" if succeeded else "on_failure"}
    results = _results(workflow, using)
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
            _start(job, results, using, now)
            fired.append(name)
        else:
            _cancel_node(job, using, now, reason=f"{name} not selected (§6.5)", by="workflow")
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
        _record_failure(workflow, _Outcome.of_job(job), callback=name)
    fired_ids = [workflow.callbacks[n] for n in workflow.fired]
    outcomes = dict(Job.objects.using(using).filter(id__in=fired_ids).values_list("id", "state"))
    if all(state in states.TERMINAL_STATES for state in outcomes.values()):
        ok = all(state == JobState.COMPLETED for state in outcomes.values())
        _finish(workflow, "completed" if ok else "failed", using, now)
    else:
        _save(workflow, using)


def _start(node: Node, inputs: list[Any], using: str, now: datetime) -> None:
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
    workflow = _lock(using, [node.id])[node.id]
    if workflow.state != "pending":
        return
    _transition(workflow, "running")
    workflow.started_at = now
    workflow.parent_results = inputs
    _save(workflow, using)
    _emit(workflow, "workflow.started", using, jobs_total=workflow.total)
    members = list(_nodes(workflow, using).values())
    given = _member_inputs(workflow.kind, inputs) or []
    for member in members[:1] if workflow.kind == "chain" else members:
        _start(member, given, using, now)


def _cancel_node(node: Node, using: str, now: datetime, *, reason: str, by: str | None) -> None:
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
    workflow = _lock(using, [node.id])[node.id]
    if workflow.state not in TERMINAL:
        _cancel_tree(workflow, using, now, reason=reason, by=by)


def _cancel_tree(workflow: Workflow, using: str, now: datetime, *, reason: str | None,
                 by: str | None) -> None:  # fmt: skip
    """Cancel ``workflow`` (locked), its unfinished jobs and nested workflows, and count
    each unfinished member as cancelled; its parent is not told (the caller decides)."""
    members = 0
    for job in (
        Job.objects.using(using)
        .filter(workflow_id=workflow.id, state__in=states.NON_TERMINAL_STATES)
        .order_by("id")
    ):
        _cancel_node(job, using, now, reason=reason or "workflow cancelled", by=by)
        if job.workflow_step is not None and job.workflow_step >= 0:
            members += 1
    for child in (
        Workflow.objects.using(using)
        .filter(parent_id=workflow.id, state__in=("pending", "running"))
        .order_by("id")
    ):
        _cancel_node(child, using, now, reason=reason or "workflow cancelled", by=by)
        members += 1
    workflow.cancelled += members
    _finish(workflow, "cancelled", using, now, propagate=False, reason=reason)


# ---------------------------------------------------------------------- resume


def _reopen(workflow: Workflow, step: int, member_id: str, using: str, now: datetime) -> None:
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
        copies = _Build(now, default_retry_policy().max_attempts)
        for later_step, node in _nodes(workflow, using).items():
            if later_step <= step or not _cancelled(node):
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
        _transition(workflow, "running")
        workflow.finished_at = None
        workflow.result = None
    _save(workflow, using)
    if was_failed and workflow.parent_id is not None:
        parent = _lock(using, [workflow.parent_id])[workflow.parent_id]
        _reopen(parent, workflow.parent_step or 0, str(workflow.id), using, now)


def _spec_tree(workflow: Workflow, using: str) -> WorkflowSpec:
    """The spec a workflow was created from, read back from its rows (newest per step)."""
    members: list[JobSpec | WorkflowSpec] = []
    for node in _nodes(workflow, using).values():
        members.append(_spec_of(node) if isinstance(node, Job) else _spec_tree(node, using))
    by_id = {
        str(job.id): job
        for job in Job.objects.using(using).filter(
            workflow_id=workflow.id, workflow_step=CALLBACK_STEP
        )
    }
    callbacks = {
        name: _spec_of(by_id[job_id])
        for name, job_id in (workflow.callbacks or {}).items()
        if job_id in by_id
    }
    return WorkflowSpec(workflow.kind, members, callbacks, workflow.name, workflow.metadata)


def envelope_ttl(ttl: Any) -> int | None:
    """A stored ``result_ttl`` back in seconds (``-1``: permanent)."""
    if ttl is None:
        return None
    seconds = int(ttl.total_seconds())
    return -1 if seconds >= MAX_RESULT_TTL else seconds


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
        result_ttl=envelope_ttl(job.result_ttl),
        extra=job.extra,
    )


# ---------------------------------------------------------------------- internals


def _nodes(workflow: Workflow, using: str) -> dict[int, Node]:
    """Member index → its newest row (a resumed chain leaves the old ones as history)."""
    rows: list[tuple[int, Any, Node]] = []
    for job in Job.objects.using(using).filter(workflow_id=workflow.id, workflow_step__gte=0):
        rows.append((job.workflow_step or 0, job.id, job))
    for child in Workflow.objects.using(using).filter(parent_id=workflow.id):
        rows.append((child.parent_step or 0, child.id, child))
    newest: dict[int, Node] = {}
    for step, _, node in sorted(rows, key=lambda row: (row[0], row[1])):
        newest[step] = node
    return dict(sorted(newest.items()))


def _terminal(node: Node) -> bool:
    if isinstance(node, Job):
        return node.state in states.TERMINAL_STATES
    return node.state in TERMINAL


def _cancelled(node: Node) -> bool:
    return node.state == (JobState.CANCELLED if isinstance(node, Job) else "cancelled")


def _results(workflow: Workflow, using: str) -> list[Any]:
    """The members' results in member order (a batch's callbacks see them, §7.4)."""
    return [node.result for node in _nodes(workflow, using).values()]


def _result_of(workflow: Workflow, using: str) -> Any:
    """What a completed nested workflow hands on: its last step's result (chain), or its
    members' results in order (group, batch)."""
    results = _results(workflow, using)
    if workflow.kind == "chain":
        return results[-1] if results else None
    return results


def _all_succeeded(workflow: Workflow) -> bool:
    return workflow.failed == 0 and workflow.cancelled == 0


def _record_failure(workflow: Workflow, outcome: _Outcome, *, callback: str | None = None) -> None:
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


def _finish(
    workflow: Workflow,
    state: str,
    using: str,
    now: datetime,
    *,
    propagate: bool = True,
    **data: Any,
) -> None:
    _transition(workflow, state)
    workflow.finished_at = now
    if state == "completed":
        workflow.result = _result_of(workflow, using)
    _save(workflow, using)
    kind = {"completed": "workflow.completed", "failed": "workflow.failed"}.get(
        state, "workflow.cancelled"
    )
    _emit(
        workflow, kind, using, state=state, jobs_completed=workflow.completed,
        jobs_failed=workflow.failed, jobs_cancelled=workflow.cancelled, error=workflow.error,
        **data,
    )  # fmt: skip
    if propagate and workflow.parent_id is not None:
        # §10.4: a nested workflow's terminal state is its outcome as a member.
        parent = _lock(using, [workflow.parent_id])[workflow.parent_id]
        if parent.state not in TERMINAL:
            _member_done(parent, _Outcome.of_workflow(workflow), using, now)


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
        started_at=workflow.started_at,
        finished_at=workflow.finished_at,
        parent_results=workflow.parent_results,
        result=workflow.result,
    )


def _lock(using: str, ids: Sequence[Any]) -> dict[Any, Workflow]:
    """Lock the workflows ``ids``, outermost first (the one order every caller uses)."""
    rows = (
        Workflow.objects.using(using)
        .select_for_update()
        .filter(pk__in=list(ids))
        .order_by("depth", "id")
    )
    return {row.id: row for row in rows}


def _lock_path(workflow_id: Any, using: str) -> Workflow:
    """Lock ``workflow_id`` and the workflows around it, outermost first; return it."""
    workflow = Workflow.objects.using(using).filter(pk=_parse(workflow_id)).first()
    if workflow is None:
        raise WorkflowNotFound(workflow_id)
    path = [workflow.id]
    parent_id = workflow.parent_id
    while parent_id is not None:
        path.append(parent_id)
        parent_id = (
            Workflow.objects.using(using).filter(pk=parent_id).values_list("parent_id", flat=True)
        ).first()
    return _lock(using, path)[workflow.id]


def _path_ids(workflow: Workflow, family: Sequence[Workflow]) -> list[Any]:
    by_id = {w.id: w for w in family}
    path: list[Any] = []
    current: Workflow | None = workflow
    while current is not None:
        path.append(current.id)
        current = by_id.get(current.parent_id) if current.parent_id else None
    return path


def _subtree_ids(workflow_id: Any, family: Sequence[Workflow]) -> set[Any]:
    """``workflow_id`` and every workflow nested in it, among ``family`` (its tree)."""
    children: dict[Any, list[Any]] = {}
    for w in family:
        if w.parent_id is not None:
            children.setdefault(w.parent_id, []).append(w.id)
    found = {workflow_id}
    todo = [workflow_id]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _parse(workflow_id: Any) -> Any:
    if isinstance(workflow_id, uuid.UUID):
        return workflow_id
    try:
        return uuid.UUID(str(workflow_id))
    except ValueError:
        raise WorkflowNotFound(workflow_id) from None


def _emit(workflow: Workflow, kind: str, using: str, **data: Any) -> None:
    extra: dict[str, Any] = {}
    if workflow.parent_id is not None:
        extra = {
            "parent_workflow_id": str(workflow.parent_id),
            "parent_step": workflow.parent_step,
        }
    events.emit_other(
        kind, f"workflow:{workflow.id}", using, workflow_id=str(workflow.id),
        workflow_type=workflow.kind, name=workflow.name or None, **extra, **data,
    )  # fmt: skip
