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

Each call writes the workflow and all its jobs through the caller's connection, so they
commit or roll back with the caller's own rows. The state machine is
``django_ojs.lifecycle`` (workflows §4-§9).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django_ojs import lifecycle
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import ValidationError
from django_ojs.models import Workflow

#: What a step may be: a :func:`job`, or a mapping ``{"type", "args"?, <options>}``.
Step = JobSpec | Mapping[str, Any]


def job(type: str, args: Iterable[Any] = (), **options: Any) -> JobSpec:
    """One job of a workflow: the type, its arguments and :func:`enqueue`'s options."""
    return lifecycle.job_spec(type, list(args), **options)


def chain(
    *steps: Step | Iterable[Step],
    name: str = "",
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Run ``steps`` one after the other (workflows §4); each sees the results before it.

    Step N+1 is enqueued when step N completes, with ``ctx.parent_results`` holding the
    results of steps 0..N. A step that fails for good (retries exhausted) fails the chain
    and cancels the steps after it.
    """
    return lifecycle.create_workflow(
        "chain", _specs(steps, "steps"), name=name, metadata=metadata, using=using
    )


def group(
    *jobs: Step | Iterable[Step],
    name: str = "",
    metadata: Mapping[str, Any] | None = None,
    using: str | None = None,
) -> Workflow:
    """Run ``jobs`` in parallel (workflows §5); the group fails if any of them failed."""
    return lifecycle.create_workflow(
        "group", _specs(jobs, "jobs"), name=name, metadata=metadata, using=using
    )


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
    given = {"on_complete": on_complete, "on_success": on_success, "on_failure": on_failure}
    callbacks = {k: _spec(v, f"callbacks.{k}") for k, v in given.items() if v is not None}
    return lifecycle.create_workflow(
        "batch",
        _specs(jobs, "jobs"),
        name=name,
        callbacks=callbacks,
        metadata=metadata,
        using=using,
    )


def _specs(items: tuple[Step | Iterable[Step], ...], field: str) -> list[JobSpec]:
    flat: list[Any] = []
    for item in items:
        if isinstance(item, JobSpec | Mapping):
            flat.append(item)
        else:
            flat.extend(item)
    return [_spec(item, f"{field}[{index}]") for index, item in enumerate(flat)]


def _spec(item: Any, field: str) -> JobSpec:
    if isinstance(item, JobSpec):
        return item
    if isinstance(item, Workflow):
        raise ValidationError(
            "Nested workflows are not supported yet: pass job specs.", field=field
        )
    if isinstance(item, Mapping):
        options = dict(item)
        if "type" not in options:
            raise ValidationError(f"{field} needs a 'type'", field=field)
        return job(options.pop("type"), options.pop("args", ()), **options)
    raise ValidationError(f"{field} must be django_ojs.job(...) or a mapping", field=field)
