"""Operations on every job matching a filter (admin API §8), in batches, one writer.

Each job goes through the same single-job operation as anywhere else (``cancel``,
``retry_discarded``, ``purge``), in its own transaction, so a bulk operation on a million
jobs never holds one long transaction, never blocks claims for long, and can be stopped
at any time: what was done stays done, nothing is half done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import QuerySet

from django_ojs.actors import Actor
from django_ojs.exceptions import OJSError, ValidationError
from django_ojs.lifecycle.settle import cancel, purge, retry_discarded
from django_ojs.lifecycle.store import db
from django_ojs.models import Job
from django_ojs.states import TERMINAL_STATES

ACTIONS = ("retry", "cancel", "delete")
#: Ids read per round trip, and errors reported at most.
BATCH = 500
MAX_ERRORS = 100


def bulk(
    action: str,
    jobs: QuerySet[Job],
    *,
    actor: Actor | None = None,
    using: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Apply ``action`` (retry, cancel, delete) to every job of ``jobs``.

    Returns ``{action, matched, succeeded, failed, errors: [{job_id, error}]}`` (at most
    100 errors listed). ``progress(done, matched)`` is called after each batch.
    """
    using = db(using)
    if action not in ACTIONS:
        raise ValidationError(f"action must be one of {', '.join(ACTIONS)}", field="action")
    ids = list(jobs.using(using).order_by("id").values_list("id", flat=True))
    out: dict[str, Any] = {
        "action": action, "matched": len(ids), "succeeded": 0, "failed": 0, "errors": [],
    }  # fmt: skip
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        if action == "delete":
            _delete(chunk, out, actor, using)
        else:
            operation = _retry if action == "retry" else _cancel
            for job_id in chunk:
                try:
                    operation(job_id, actor, using)
                except OJSError as exc:
                    _failed(out, job_id, exc.message)
                else:
                    out["succeeded"] += 1
        if progress is not None:
            progress(min(start + BATCH, len(ids)), len(ids))
    return out


def _retry(job_id: Any, actor: Actor | None, using: str) -> None:
    retry_discarded(job_id, actor=actor, using=using)


def _cancel(job_id: Any, actor: Actor | None, using: str) -> None:
    cancel(job_id, reason="bulk cancel", actor=actor, using=using)


def _delete(chunk: list[Any], out: dict[str, Any], actor: Actor | None, using: str) -> None:
    finished = set(
        Job.objects.using(using)
        .filter(pk__in=chunk, state__in=list(TERMINAL_STATES))
        .values_list("pk", flat=True)
    )
    deleted = purge(list(finished), actor=actor, using=using) if finished else 0
    out["succeeded"] += deleted
    for job_id in _missing(chunk, finished):
        _failed(out, job_id, "Only completed, discarded or cancelled jobs can be deleted")


def _missing(chunk: Iterable[Any], kept: set[Any]) -> list[Any]:
    return [job_id for job_id in chunk if job_id not in kept]


def _failed(out: dict[str, Any], job_id: Any, message: str) -> None:
    out["failed"] += 1
    if len(out["errors"]) < MAX_ERRORS:
        out["errors"].append({"job_id": str(job_id), "error": message})
