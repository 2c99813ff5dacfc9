"""The workflow Python API: ``django_ojs.chain``, ``group``, ``batch`` and ``job``.

::

    import django_ojs
    from django_ojs import job

    with transaction.atomic():
        order = Order.objects.create(...)
        django_ojs.chain(
            job("orders.charge", [order.pk], queue="payments"),
            job("orders.reserve_stock", [order.pk]),
            job("orders.send_confirmation", [order.pk], queue="email"),
            name=f"order {order.pk}",
        )

A step may itself be a workflow not started yet (workflows §10): ``Group(job(...),
job(...))`` inside a ``chain(...)`` fans out and the chain waits for all of it.

Each call writes the workflow and all its jobs through the caller's connection to the job
database (``OJS_DATABASE``), so they commit or roll back with the caller's own rows when
those live in the same database (with the jobs in a database of their own, wrap the call
in ``transaction.atomic(using="jobs")``: see docs/how-to/run-at-scale.md). The state machine is
``django_ojs.lifecycle`` (workflows §4-§9).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django_ojs import lifecycle
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import ValidationError
from django_ojs.models import Workflow

#: What a step may be: a :func:`job`, a nested :class:`Chain`/:class:`Group`/:class:`Batch`,
#: or a mapping ``{"type", "args"?, <options>}`` (``{"type": "group", "jobs": [...]}`` nests).
Step = JobSpec | lifecycle.WorkflowSpec | Mapping[str, Any]


def job(type: str, args: Iterable[Any] = (), **options: Any) -> JobSpec:
    """One job of a workflow: the type, its arguments and :func:`enqueue`'s options."""
    return lifecycle.job_spec(type, list(args), **options)


class Chain(lifecycle.WorkflowSpec):
    """A chain not started yet: a step of another workflow, or ``.enqueue()`` it.

    ``django_ojs.chain(a, b)`` is ``Chain(a, b).enqueue()``.
    """

    def __init__(
        self,
        *steps: Step | Iterable[Step],
        name: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__("chain", _specs(steps, "steps"), {}, name, dict(metadata or {}))

    def enqueue(self, *, using: str | None = None) -> Workflow:
        """Create it (and start it) in the caller's transaction."""
        return lifecycle.create_workflow_spec(self, using=using)


class Group(lifecycle.WorkflowSpec):
    """A group not started yet: a step of another workflow, or ``.enqueue()`` it."""

    def __init__(
        self,
        *jobs: Step | Iterable[Step],
        name: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__("group", _specs(jobs, "jobs"), {}, name, dict(metadata or {}))

    def enqueue(self, *, using: str | None = None) -> Workflow:
        """Create it (and start it) in the caller's transaction."""
        return lifecycle.create_workflow_spec(self, using=using)


class Batch(lifecycle.WorkflowSpec):
    """A batch not started yet: a step of another workflow, or ``.enqueue()`` it."""

    def __init__(
        self,
        *jobs: Step | Iterable[Step],
        on_complete: Step | None = None,
        on_success: Step | None = None,
        on_failure: Step | None = None,
        name: str = "",
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        given = {"on_complete": on_complete, "on_success": on_success, "on_failure": on_failure}
        callbacks = {k: _job(v, f"callbacks.{k}") for k, v in given.items() if v is not None}
        super().__init__("batch", _specs(jobs, "jobs"), callbacks, name, dict(metadata or {}))

    def enqueue(self, *, using: str | None = None) -> Workflow:
        """Create it (and start it) in the caller's transaction."""
        return lifecycle.create_workflow_spec(self, using=using)


def chain(
    *steps: Step | Iterable[Step],
    name: str = "",
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Run ``steps`` one after the other (workflows §4); each sees the results before it.

    Step N+1 is enqueued when step N completes, with ``ctx.parent_results`` holding the
    results of steps 0..N. A step that fails for good (retries exhausted) fails the chain
    and cancels the steps after it. A step may be a :class:`Group`, :class:`Batch` or
    :class:`Chain` (§10): it counts as done when it is.
    """
    return Chain(*steps, name=name, metadata=metadata).enqueue(using=using)


def group(
    *jobs: Step | Iterable[Step],
    name: str = "",
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Run ``jobs`` in parallel (workflows §5); the group fails if any of them failed."""
    return Group(*jobs, name=name, metadata=metadata).enqueue(using=using)


def batch(
    *jobs: Step | Iterable[Step],
    on_complete: Step | None = None,
    on_success: Step | None = None,
    on_failure: Step | None = None,
    name: str = "",
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Run ``jobs`` in parallel, then the callbacks their outcome selects (workflows §6).

    ``on_complete`` always runs once every job has finished; ``on_success`` only if all
    succeeded; ``on_failure`` if any failed. Each fires exactly once and sees every job's
    result in ``ctx.parent_results`` (indexed like ``jobs``).
    """
    return Batch(
        *jobs,
        on_complete=on_complete,
        on_success=on_success,
        on_failure=on_failure,
        name=name,
        metadata=metadata,
    ).enqueue(using=using)


def _specs(
    items: tuple[Step | Iterable[Step], ...], field: str
) -> list[JobSpec | lifecycle.WorkflowSpec]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, JobSpec | lifecycle.WorkflowSpec | Mapping | Workflow):
            flat.append(item)
        else:
            flat.extend(item)
    return [_step(item, f"{field}[{index}]") for index, item in enumerate(flat)]


def _step(item: Any, field: str) -> JobSpec | lifecycle.WorkflowSpec:
    if isinstance(item, lifecycle.WorkflowSpec):
        return item
    if (
        isinstance(item, Mapping)
        and item.get("type") in lifecycle.WORKFLOW_KINDS
        and ("steps" in item or "jobs" in item)
    ):
        options = dict(item)
        kind = options.pop("type")
        members = options.pop("steps" if kind == "chain" else "jobs", None)
        if not isinstance(members, list | tuple):
            raise ValidationError(f"{field}: a nested {kind} needs a list of jobs", field=field)
        callbacks = options.pop("callbacks", None) or {}
        if kind == "batch":
            return Batch(*members, **callbacks, **options)
        return (Chain if kind == "chain" else Group)(*members, **options)
    return _job(item, field)


def _job(item: Any, field: str) -> JobSpec:
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, Workflow):
        raise ValidationError(
            f"{field} is a workflow that already exists; nest a Chain(...), Group(...) or "
            "Batch(...) that is not started yet.",
            field=field,
        )
    if isinstance(item, Mapping):
        options = dict(item)
        if "type" not in options:
            raise ValidationError(f"{field} needs a 'type'", field=field)
        return job(options.pop("type"), options.pop("args", ()), **options)
    raise ValidationError(f"{field} must be django_ojs.job(...) or a mapping", field=field)
