"""What a workflow is made of: its spec, the checks at creation (§10.2, §11.1) and
the rows one tree is built into (also the copies a resumed chain gets).

Internal to :mod:`django_ojs.lifecycle.workflows`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django_ojs import tenancy
from django_ojs.envelope import MAX_RESULT_TTL, JobSpec
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle.rows import job_row, through_middleware
from django_ojs.lifecycle.workflows.rows import (
    Node,
    nodes,
)
from django_ojs.models import Job, Workflow
from django_ojs.retry import RetryPolicy
from django_ojs.tenancy import tenant_of

KINDS = ("chain", "group", "batch")


CALLBACKS = ("on_complete", "on_success", "on_failure")


#: ``workflow_step`` of a batch callback job.
CALLBACK_STEP = -1


#: Levels of workflows one workflow may have, itself included (§10.2: at least 3).
MAX_DEPTH = 5


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


def validate(spec: WorkflowSpec, path: str, level: int) -> None:
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
            validate(member, f"{at}{field_}[{index}]", level + 1)


def one_tenant(spec: WorkflowSpec) -> WorkflowSpec:
    """``spec`` with every job of its tree in the workflow's one tenant (multi-tenancy
    §15.2): the tenant its jobs name, else the current one (``django_ojs.tenant``); jobs
    that name none get it. Jobs of two tenants in one workflow are refused."""
    named = {tenant_of(job.meta) for job in spec.jobs()} - {""}
    current = tenancy.current()
    if current is not None:
        named.add(current)
    if len(named) > 1:
        raise ValidationError(
            "A workflow's jobs must all belong to one tenant (multi-tenancy §15.2); "
            f"these name {', '.join(sorted(named))}.",
            field="meta.tenant_id",
            details={"tenants": sorted(named)},
        )
    if not named:
        return spec
    (tenant,) = named

    def job(member: JobSpec) -> JobSpec:
        if tenant_of(member.meta):
            return member
        return replace(member, meta={**member.meta, "tenant_id": tenant})

    def tree(node: WorkflowSpec) -> WorkflowSpec:
        members = [tree(m) if isinstance(m, WorkflowSpec) else job(m) for m in node.members]
        callbacks = {name: job(cb) for name, cb in node.callbacks.items()}
        return replace(node, members=members, callbacks=callbacks)

    return tree(spec)


class Build:
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
            given = member_inputs(spec.kind, inputs) if go else None
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
            self.job(spec_of(node), parent, node.workflow_step or 0, pending=True)
            return
        root = Workflow(id=node.root_id) if node.root_id else None
        self.workflow(
            spec_tree(node, using), parent=parent, step=node.parent_step, root=root,
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


def member_inputs(kind: str, inputs: list[Any] | None) -> list[Any] | None:
    """What a started member sees as ``parent_results``: a chain's first step always a list
    (§7.2), a group's or batch's members what their workflow was given (none at the top)."""
    if kind == "chain":
        return list(inputs or [])
    return inputs


def spec_tree(workflow: Workflow, using: str) -> WorkflowSpec:
    """The spec a workflow was created from, read back from its rows (newest per step)."""
    members: list[JobSpec | WorkflowSpec] = []
    for node in nodes(workflow, using).values():
        members.append(spec_of(node) if isinstance(node, Job) else spec_tree(node, using))
    by_id = {
        str(job.id): job
        for job in Job.objects.using(using).filter(
            workflow_id=workflow.id, workflow_step=CALLBACK_STEP
        )
    }
    callbacks = {
        name: spec_of(by_id[job_id])
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


def spec_of(job: Job) -> JobSpec:
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
