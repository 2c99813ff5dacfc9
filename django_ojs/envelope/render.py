"""Rendering a stored job (any object with the ``Job`` attributes) as OJS JSON.

Pure: no database access. Timestamps are RFC 3339 in UTC with milliseconds (HB §3).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

from django_ojs.envelope.parse import MAX_RESULT_TTL, SPECVERSION
from django_ojs.retry import RetryPolicy


def format_timestamp(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with millisecond precision and ``Z`` (HTTP binding §6.3)."""
    if value is None:
        return None
    return _rfc3339(value)


@functools.lru_cache(maxsize=4096)
def _rfc3339(value: datetime) -> str:
    # Cached: the jobs of one push share their enqueued_at, those of one claim their
    # started_at, and a worker formats each several times (its context, its deadlines).
    # Equal instants hash and compare equal whatever their time zone, and give one text.
    # isoformat, not strftime: strftime("%Y") drops the zero padding of years below 1000.
    value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="milliseconds") + "Z"


#: The timestamps :func:`to_wire` renders when set, in the envelope's order.
_TIMESTAMPS = (
    "scheduled_at",
    "expires_at",
    "started_at",
    "completed_at",
    "cancelled_at",
    "discarded_at",
)
#: The durations it renders when set: (wire name, job attribute, already milliseconds).
_DURATIONS = (
    ("timeout", "timeout_ms", False),
    ("timeout_ms", "timeout_ms", True),
    ("visibility_timeout", "visibility_timeout_ms", False),
    ("visibility_timeout_ms", "visibility_timeout_ms", True),
    ("total_timeout", "total_timeout_ms", False),
    ("enqueue_ttl", "enqueue_ttl_ms", False),
    ("grace_period", "grace_period_ms", False),
    ("heartbeat_timeout", "heartbeat_timeout_ms", False),
)


def _seconds(ms: int | None) -> int | float | None:
    if ms is None:
        return None
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def to_wire(
    job: Any, *, default_retry: RetryPolicy | None = None, default_result_ttl: int | None = None
) -> dict[str, Any]:
    """Render a stored job as the complete OJS envelope (core §5, HTTP binding §9)."""
    ts = format_timestamp
    policy = RetryPolicy.from_wire(job.retry, base=default_retry) if job.retry else default_retry
    out: dict[str, Any] = dict(job.extra or {})
    out.update(
        {
            "specversion": SPECVERSION,
            "id": str(job.id),
            "type": job.type,
            "queue": job.queue,
            "args": job.args if job.args is not None else [],
            "meta": job.meta if job.meta is not None else {},
            "priority": job.priority,
            "state": str(job.state),
            "attempt": job.attempt,
            "max_attempts": job.max_attempts,
            "created_at": ts(job.created_at),
            "enqueued_at": ts(job.enqueued_at),
        }
    )
    # Only what is set (most of a job's options are not): the same keys, in the same order,
    # as testing every one of them, without formatting a timestamp that is None.
    for name in _TIMESTAMPS:
        value = getattr(job, name)
        if value is not None:
            out[name] = ts(value)
    if job.state == "retryable" and job.next_attempt_at is not None:
        out["next_attempt_at"] = ts(job.next_attempt_at)
    for name, attname, in_ms in _DURATIONS:
        value = getattr(job, attname)
        if value is not None:
            out[name] = _seconds(value) if not in_ms else value
    if policy:
        out["retry"] = policy.to_wire()
    for name, value in (
        ("unique", job.unique),
        ("rate_limit", getattr(job, "rate_limit", None)),
        ("schema", job.schema),
        ("tags", job.tags or None),
        ("error", job.error),
    ):
        if value is not None:
            out[name] = value
    if job.state == "active":
        if job.worker_id is not None:
            out["worker_id"] = job.worker_id
        if job.visible_until is not None:
            out["visible_until"] = ts(job.visible_until)
    out["errors"] = job.errors or []
    if job.state == "completed" or job.result is not None:
        out["result"] = job.result
    ttl = getattr(job, "result_ttl", None)
    if ttl is not None:
        seconds = int(ttl.total_seconds())
        out["result_ttl"] = -1 if seconds >= MAX_RESULT_TTL else seconds
    if job.state == "completed" and job.completed_at is not None:
        # Results §6.2; the expiry follows the job's result_ttl or OJS_RESULT_TTL.
        out["result_stored_at"] = ts(job.completed_at)
        pruned = getattr(job, "result_pruned_at", None)
        if pruned is not None:
            out["result_pruned_at"] = ts(pruned)
        elif ttl is not None and ttl.total_seconds() < MAX_RESULT_TTL:
            out["result_expires_at"] = ts(job.completed_at + ttl)
        elif ttl is None and default_result_ttl is not None:
            out["result_expires_at"] = ts(job.completed_at + timedelta(seconds=default_result_ttl))
    if job.state == "discarded":
        out["dead_letter"] = job.dead_letter
    if hasattr(job, "get_deferred_fields"):
        # A model's deferred field is one missing from its __dict__ (Django's own test in
        # get_deferred_fields, which builds the set of every field to answer it).
        workflow_id = vars(job).get("workflow_id")
    else:
        workflow_id = getattr(job, "workflow_id", None)
    if workflow_id is not None:
        # Workflows §7.1: upstream results, indexed by step (chain) or member (batch).
        out["workflow_id"] = str(workflow_id)
        out["workflow_step"] = job.workflow_step
        out["parent_results"] = job.parent_results if job.parent_results is not None else []
    return out
