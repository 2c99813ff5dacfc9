"""The bulk-operations extension (``ojs-bulk-operations.md``): enqueue, cancel, retry and
delete a list of jobs in one request, item by item, ``atomic`` or ``partial``.

Each item goes through the same single-job operation as anywhere else (``push``,
``cancel``, ``retry_discarded``/``run_now``, ``purge``) in a savepoint of its own. In
``partial`` mode each item commits on its own; in ``atomic`` mode all run in one
transaction, rolled back as a whole when any item fails (§5.3). Filters and limits are the
caller's (the HTTP view); this module never reads a request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from django_ojs.actors import Actor
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import InvalidTransition, JobNotFound, OJSError
from django_ojs.lifecycle import events
from django_ojs.lifecycle.push import push
from django_ojs.lifecycle.settle import cancel, purge, retry_discarded, run_now
from django_ojs.lifecycle.store import db, parse_id
from django_ojs.models import Job
from django_ojs.states import TERMINAL_STATES, JobState

ATOMICITY = ("atomic", "partial")
#: Per-item ``status`` of a success, per operation (§5.2, §6.2).
DONE = {"enqueue": "created", "cancel": "cancelled", "retry": "retried", "delete": "deleted"}
#: The name of the count of successes in answers and events (§6.2, §12.1).
DONE_COUNT = {"cancel": "cancelled", "retry": "retried", "delete": "deleted"}


@dataclass
class Item:
    """The outcome of one item: ``status`` is ``created``/``duplicate``/``dropped`` (enqueue),
    ``cancelled``/``retried``/``deleted``, or ``failed``/``skipped`` with ``error``."""

    index: int
    status: str
    job: Job | None = None
    job_id: str | None = None
    error: OJSError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RolledBack(OJSError):
    """Not applied: another item of this atomic request failed, so none was applied."""

    code = "rolled_back"
    http_status = 422


class _Abort(Exception):
    """Raised inside an atomic request's transaction to roll it back."""


def bulk_enqueue(
    specs: Sequence[JobSpec | OJSError],
    *,
    atomicity: str = "partial",
    using: str | None = None,
) -> list[Item]:
    """Enqueue each job of ``specs`` (an item that failed validation is its error).

    A job kept by a unique policy's ``ignore`` is ``duplicate``; a job left out by the
    enqueue middleware is ``dropped``; both count as successes.
    """
    using = db(using)

    def one(index: int, spec: JobSpec | OJSError) -> Item:
        if isinstance(spec, OJSError):
            return Item(index, "failed", error=spec)
        job = push(spec, using=using)
        if getattr(job, "dropped", False):
            return Item(index, "dropped", job=None)
        status = "duplicate" if getattr(job, "deduplicated", False) else "created"
        return Item(index, status, job=job, job_id=str(job.id))

    items = _run(list(enumerate(specs)), one, atomicity, using)
    _announce("enqueue", items, using, atomicity=atomicity)
    return items


def bulk_change(
    operation: str,
    job_ids: Sequence[Any],
    *,
    atomicity: str = "partial",
    actor: Actor | None = None,
    using: str | None = None,
) -> list[Item]:
    """Cancel, retry or delete each job of ``job_ids`` (§6 to §8).

    ``cancel``: a job that has not finished (an ``active`` one at once, digest §8.8).
    ``retry``: ``discarded`` or ``retryable`` jobs back to ``available`` (§7). ``delete``:
    finished jobs only (§8). Any other state is a ``skipped`` item with its error.
    """
    using = db(using)
    if operation not in ("cancel", "retry", "delete"):
        raise ValueError(f"unknown bulk operation {operation!r}")
    apply = {"cancel": _cancel, "retry": _retry, "delete": _delete}[operation]

    def one(index: int, job_id: Any) -> Item:
        apply(job_id, actor, using)
        return Item(index, DONE[operation], job_id=str(job_id))

    items = _run(list(enumerate(job_ids)), one, atomicity, using, failed="skipped")
    for item, job_id in zip(items, job_ids, strict=True):
        item.job_id = str(job_id)
    _announce(operation, items, using)
    return items


def _run(
    work: list[tuple[int, Any]],
    one: Callable[[int, Any], Item],
    atomicity: str,
    using: str,
    *,
    failed: str = "failed",
) -> list[Item]:
    def attempt(index: int, value: Any) -> Item:
        try:
            with transaction.atomic(using=using):  # a savepoint inside an atomic request
                return one(index, value)
        except OJSError as exc:
            return Item(index, failed, error=exc)

    if atomicity != "atomic":
        return [attempt(index, value) for index, value in work]
    items: list[Item] = []
    try:
        with transaction.atomic(using=using):
            items = [attempt(index, value) for index, value in work]
            if any(not item.ok for item in items):
                raise _Abort
    except _Abort:
        culprits = [item.index for item in items if not item.ok]
        for item in items:
            if item.ok:
                item.status, item.job = "failed", None
                item.error = RolledBack(
                    f"Not applied: item(s) {culprits[:10]} of this atomic request failed.",
                    details={"failed_indexes": culprits[:100]},
                )
            else:
                item.status = "failed"
    return items


def _cancel(job_id: Any, actor: Actor | None, using: str) -> None:
    cancel(job_id, reason="bulk cancel", idempotent=False, actor=actor, using=using)


def _retry(job_id: Any, actor: Actor | None, using: str) -> None:
    state = _state(job_id, using)
    if state == JobState.RETRYABLE:
        run_now(job_id, actor=actor, using=using)
    elif state == JobState.DISCARDED:
        retry_discarded(job_id, actor=actor, using=using)
    else:
        raise InvalidTransition(
            job_id, state, "retry", {"discarded", "retryable"},
            message=f"Job '{job_id}' is {state}: only discarded or retryable jobs can be retried.",
        )  # fmt: skip


def _delete(job_id: Any, actor: Actor | None, using: str) -> None:
    state = _state(job_id, using)
    if state not in TERMINAL_STATES or not purge([parse_id(job_id)], actor=actor, using=using):
        raise InvalidTransition(
            job_id, state, "delete", {"completed", "cancelled", "discarded"},
            message=f"Job '{job_id}' is {state}: only finished jobs can be deleted.",
        )  # fmt: skip


def _state(job_id: Any, using: str) -> str:
    state = (
        Job.objects.using(using).filter(pk=parse_id(job_id)).values_list("state", flat=True).first()
    )
    if state is None:
        raise JobNotFound(job_id)
    return str(state)


def _announce(operation: str, items: list[Item], using: str, **extra: Any) -> None:
    """``bulk.<operation>.completed`` (§12.1), after the work (whatever the outcome)."""
    done = sum(1 for item in items if item.ok)
    data: dict[str, Any] = {"total": len(items), **extra}
    if operation == "enqueue":
        data.update(succeeded=done, failed=len(items) - done)
    else:
        data.update({DONE_COUNT[operation]: done, "skipped": len(items) - done})
    events.emit_other(f"bulk.{operation}.completed", "bulk", using, **data)
