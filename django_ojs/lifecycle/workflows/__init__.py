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

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import states
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import WorkflowNotFound
from django_ojs.lifecycle import audit, events, fairness
from django_ojs.lifecycle.rows import build_spec, check_tenants, check_types
from django_ojs.lifecycle.store import db
from django_ojs.lifecycle.workflows.progress import (
    Outcome,
    callback_finished,
    cancel_tree,
    member_done,
    reopen,
)
from django_ojs.lifecycle.workflows.rows import (
    TERMINAL,
    emit,
    lock,
    lock_path,
    parse_id,
    path_ids,
    require,
    subtree_ids,
)
from django_ojs.lifecycle.workflows.spec import (
    KINDS,
    MAX_DEPTH,
    Build,
    WorkflowSpec,
    one_tenant,
    validate,
)
from django_ojs.models import Job, Workflow
from django_ojs.policy import default_retry_policy

__all__ = [
    "KINDS",
    "MAX_DEPTH",
    "WorkflowSpec",
    "cancel",
    "create",
    "create_spec",
    "get",
    "job_spec",
    "member_finished",
    "resume",
    "tree",
]


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
    validate(spec, "", 1)
    spec = one_tenant(spec)
    check_types(list(spec.jobs()))
    check_tenants(list(spec.jobs()))
    now = timezone.now()
    build = Build(now, default_retry_policy().max_attempts)
    with transaction.atomic(using=using):
        root = build.workflow(spec, parent=None, step=None, root=None, started=True, inputs=None)
        Workflow.objects.using(using).bulk_create(build.workflows)
        fairness.stamp_new(build.jobs, using)
        written = get_driver(using).push_many(
            [build.jobs],
            now=now,
            events=events.mode(),
            source=settings.EVENT_SOURCE,
        )
        for workflow in build.workflows:
            if workflow.state == "running":
                emit(workflow, "workflow.started", using, jobs_total=workflow.total)
    events.signal(written, using)
    for row in [*build.jobs, *build.workflows]:
        row._state.adding = False
        row._state.db = using
    return root


def get(workflow_id: Any, *, using: str | None = None) -> Workflow:
    """The workflow ``workflow_id``; raises :class:`WorkflowNotFound`."""
    workflow = Workflow.objects.using(db(using)).filter(pk=parse_id(workflow_id)).first()
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
    below = subtree_ids(workflow.id, family)
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
        below = subtree_ids(found.id, family)
        # Jobs before workflow rows: the order member_finished takes them in.
        jobs = get_driver(using).lock_rows(
            Job.objects.using(using).filter(
                workflow_id__in=below, state__in=states.NON_TERMINAL_STATES
            ),
            limit=1_000_000,
            skip_locked=False,
        )
        locked = lock(using, [*path_ids(found, family), *below])
        workflow = locked[found.id]
        audit.record(
            actor, "workflow.cancel", using, job_ids=[job.id for job in jobs], reason=reason,
            workflow_id=str(workflow.id), previous_state=workflow.state,
        )  # fmt: skip
        if workflow.state == "cancelled":
            return workflow
        require(workflow, "cancelled")
        cancel_tree(workflow, using, now, reason=reason, by=audit.by(None, actor))
        if workflow.parent_id is not None:
            parent = locked[workflow.parent_id]
            if parent.state not in TERMINAL:
                member_done(parent, Outcome.of_workflow(workflow), using, now)
    return workflow


def member_finished(job: Job, using: str, now: datetime) -> None:
    """Account for ``job`` (of a workflow) having just become terminal, in its transaction."""
    if job.workflow_id is None:
        return
    workflow = lock_path(job.workflow_id, using)
    if job.workflow_step is None or job.workflow_step < 0:
        callback_finished(workflow, job, using, now)
        return
    if workflow.state in TERMINAL:
        return  # a cancelled workflow counted its jobs when it cancelled them
    member_done(workflow, Outcome.of_job(job), using, now)


def resume(job: Job, using: str, now: datetime) -> None:
    """A failed member went back to work (dead-letter retry): undo its count, re-open.

    A chain gets fresh ``pending`` copies of the steps its failure cancelled (the
    cancelled rows stay, as history), so it carries on from the retried step. A nested
    workflow that failed because of this member re-opens too, and so on outwards.
    """
    if job.workflow_id is None or job.workflow_step is None or job.workflow_step < 0:
        return
    workflow = lock_path(job.workflow_id, using)
    reopen(workflow, job.workflow_step, str(job.id), using, now)


def job_spec(type: str, args: Any = (), **options: Any) -> JobSpec:
    """A validated job spec with :func:`~django_ojs.enqueue`'s options (a workflow step)."""
    return build_spec(type, args, options)
