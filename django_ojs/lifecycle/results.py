"""Results (OJS results extension): wait for a job's outcome, read many, prune old ones.

A job's result is its ``result`` column (set by ACK) and its error its ``error`` (set by
a FAIL that discards it). The result of a completed job is kept ``result_ttl`` seconds
(the job's, or ``OJS_RESULT_TTL``), then :func:`prune_results` deletes it and records
``result_pruned_at``; reading it afterwards raises :class:`ResultPruned` (410). Errors
stay with the job as long as the job (the dead letter queue needs them).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import DateTimeField, ExpressionWrapper, F

from django_ojs import states
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import JobNotFound, ResultPruned, ValidationError, WaitTimeout
from django_ojs.lifecycle.store import db, parse_id
from django_ojs.models import Job

#: Ids one bulk result request may ask for.
MAX_IDS = 1000


def wait(job_id: Any, timeout: float = 30.0, *, using: str | None = None) -> Job:
    """Block until job ``job_id`` finishes, then return it (``job.result``, ``job.error``).

    Wakes as soon as the job's terminal transition commits: on PostgreSQL through
    LISTEN/NOTIFY, on SQLite by polling (at most every 0.5 s). Call it after the
    transaction that enqueued the job has committed (another connection waits).

    Raises :class:`WaitTimeout` when the job is still running after ``timeout`` seconds,
    :class:`JobNotFound` if there is no such job.
    """
    using = db(using)
    pk = parse_id(job_id)
    if timeout < 0:
        raise ValidationError("timeout must be zero or more seconds", field="timeout")
    state = get_driver(using).wait_finished(pk, timeout)
    if state is None:
        raise JobNotFound(job_id)
    if state not in states.TERMINAL_STATES:
        raise WaitTimeout(
            f"Job '{pk}' is still {state} after {timeout:g} s.",
            details={"job_id": str(pk), "state": state, "timeout": timeout},
        )
    job = Job.objects.using(using).filter(pk=pk).first()
    if job is None:
        raise JobNotFound(job_id)
    return job


def outcome(job: Job) -> dict[str, Any]:
    """``{job_id, state, result | error}`` of a job (results §10.3); raises
    :class:`ResultPruned` for a completed job whose result was deleted."""
    out: dict[str, Any] = {"job_id": str(job.id), "state": str(job.state)}
    if job.state == states.JobState.COMPLETED:
        if job.result_pruned_at is not None:
            raise ResultPruned(
                f"The result of job '{job.id}' was deleted at "
                f"{job.result_pruned_at.isoformat()} (its result_ttl had passed).",
                details={"job_id": str(job.id)},
            )
        out["result"] = job.result
    elif job.state in states.TERMINAL_STATES:
        out["result"] = None
        out["error"] = job.error
    else:
        out["result"] = None
    return out


def results(job_ids: Sequence[Any], *, using: str | None = None) -> dict[str, dict[str, Any]]:
    """Results §10.4: each id's ``{state, result}`` (``null`` while unfinished or pruned);
    an unknown id is ``{"state": null, "result": null}``."""
    using = db(using)
    if not isinstance(job_ids, list | tuple) or not job_ids:
        raise ValidationError("ids must be a non-empty array of job ids", field="ids")
    if len(job_ids) > MAX_IDS:
        raise ValidationError(f"At most {MAX_IDS} ids per request", field="ids")
    parsed: dict[str, Any] = {}
    for index, raw in enumerate(job_ids):
        try:
            parsed[str(raw)] = parse_id(raw)
        except JobNotFound:
            raise ValidationError(f"ids[{index}] is not a job id", field=f"ids[{index}]") from None
    rows = {
        row[0]: row[1:]
        for row in Job.objects.using(using)
        .filter(pk__in=list(parsed.values()))
        .values_list("id", "state", "result", "error", "result_pruned_at")
    }
    out: dict[str, dict[str, Any]] = {}
    for raw, pk in parsed.items():
        if pk not in rows:
            out[raw] = {"state": None, "result": None}
            continue
        state, result, error, pruned = rows[pk]
        entry: dict[str, Any] = {"state": state, "result": None}
        if state == states.JobState.COMPLETED and pruned is None:
            entry["result"] = result
        elif state == states.JobState.COMPLETED:
            entry["result_pruned"] = True
        elif state in states.TERMINAL_STATES:
            entry["error"] = error
        out[raw] = entry
    return out


def prune_results(now: datetime, *, using: str | None = None, batch: int = 5000) -> int:
    """Delete the results whose ``result_ttl`` (or ``OJS_RESULT_TTL``) has passed.

    The job stays (its own retention applies); ``result`` becomes NULL and
    ``result_pruned_at`` is set. At most ``batch`` jobs per call.
    """
    using = db(using)
    done = Job.objects.using(using).filter(
        state=states.JobState.COMPLETED, result_pruned_at__isnull=True
    )
    default_cutoff = now - timedelta(seconds=settings.RESULT_TTL)
    expired = ExpressionWrapper(F("completed_at") + F("result_ttl"), output_field=DateTimeField())
    ids = list(
        done.filter(result_ttl__isnull=True, completed_at__lt=default_cutoff).values_list(
            "pk", flat=True
        )[:batch]
    )
    ids += list(
        done.filter(result_ttl__isnull=False)
        .annotate(expires=expired)
        .filter(expires__lt=now)
        .values_list("pk", flat=True)[: max(0, batch - len(ids))]
    )
    if not ids:
        return 0
    return Job.objects.using(using).filter(pk__in=ids).update(result=None, result_pruned_at=now)
