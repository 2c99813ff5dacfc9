"""A workflow's rows: its members, locks, saves, events and the §8.2 transition table.

Internal to :mod:`django_ojs.lifecycle.workflows`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django_ojs import states
from django_ojs.exceptions import InvalidTransition, WorkflowNotFound
from django_ojs.lifecycle import events
from django_ojs.models import Job, Workflow
from django_ojs.states import JobState

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


def nodes(workflow: Workflow, using: str) -> dict[int, Node]:
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


def is_terminal(node: Node) -> bool:
    if isinstance(node, Job):
        return node.state in states.TERMINAL_STATES
    return node.state in TERMINAL


def is_cancelled(node: Node) -> bool:
    return node.state == (JobState.CANCELLED if isinstance(node, Job) else "cancelled")


def member_results(workflow: Workflow, using: str) -> list[Any]:
    """The members' results in member order (a batch's callbacks see them, §7.4)."""
    return [node.result for node in nodes(workflow, using).values()]


def result_of(workflow: Workflow, using: str) -> Any:
    """What a completed nested workflow hands on: its last step's result (chain), or its
    members' results in order (group, batch)."""
    results = member_results(workflow, using)
    if workflow.kind == "chain":
        return results[-1] if results else None
    return results


def all_succeeded(workflow: Workflow) -> bool:
    return workflow.failed == 0 and workflow.cancelled == 0


def transition(workflow: Workflow, state: str) -> None:
    require(workflow, state)
    workflow.state = state


def require(workflow: Workflow, state: str) -> None:
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


def save(workflow: Workflow, using: str) -> None:
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


def lock(using: str, ids: Sequence[Any]) -> dict[Any, Workflow]:
    """Lock the workflows ``ids``, outermost first (the one order every caller uses)."""
    rows = (
        Workflow.objects.using(using)
        .select_for_update()
        .filter(pk__in=list(ids))
        .order_by("depth", "id")
    )
    return {row.id: row for row in rows}


def lock_path(workflow_id: Any, using: str) -> Workflow:
    """Lock ``workflow_id`` and the workflows around it, outermost first; return it."""
    workflow = Workflow.objects.using(using).filter(pk=parse_id(workflow_id)).first()
    if workflow is None:
        raise WorkflowNotFound(workflow_id)
    path = [workflow.id]
    parent_id = workflow.parent_id
    while parent_id is not None:
        path.append(parent_id)
        parent_id = (
            Workflow.objects.using(using).filter(pk=parent_id).values_list("parent_id", flat=True)
        ).first()
    return lock(using, path)[workflow.id]


def path_ids(workflow: Workflow, family: Sequence[Workflow]) -> list[Any]:
    by_id = {w.id: w for w in family}
    path: list[Any] = []
    current: Workflow | None = workflow
    while current is not None:
        path.append(current.id)
        current = by_id.get(current.parent_id) if current.parent_id else None
    return path


def subtree_ids(workflow_id: Any, family: Sequence[Workflow]) -> set[Any]:
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


def parse_id(workflow_id: Any) -> Any:
    if isinstance(workflow_id, uuid.UUID):
        return workflow_id
    try:
        return uuid.UUID(str(workflow_id))
    except ValueError:
        raise WorkflowNotFound(workflow_id) from None


def emit(workflow: Workflow, kind: str, using: str, **data: Any) -> None:
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
