"""Request validation and response rendering for the HTTP API. No database writes.

Requests accept every shape the HTTP binding, the digest (§1.6) and the conformance
suites use; responses carry the union of the fields they read (both ``id`` and
``job_id``, ``state`` and ``directive``...). Body fields that fail validation raise
``ValidationError`` (``invalid_payload``) naming the field.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from django_ojs import envelope, scheduling, validation
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import Heartbeat
from django_ojs.models import Event, Job
from django_ojs.queues import QueueInfo
from django_ojs.states import JobState

# --------------------------------------------------------------------------- requests


def require_object(data: Any, what: str = "The request body") -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValidationError(f"{what} must be a JSON object", field="")
    return data


def _string(body: dict[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise ValidationError(f"{name} is required", field=name)
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > 255:
        raise ValidationError(f"{name} must be at most 255 characters", field=name)
    return validation.check_text(value, name)


def job_id(body: dict[str, Any]) -> str:
    """``job_id`` (HB), or ``id`` as an alias."""
    value = body.get("job_id", body.get("id"))
    if value is None:
        raise ValidationError("job_id is required", field="job_id")
    if not isinstance(value, str) or not value:
        raise ValidationError("job_id must be a job id string", field="job_id")
    return value


def _duration(body: dict[str, Any], name: str) -> timedelta | None:
    """A duration sent as ``<name>_ms`` (HB), or ``<name>`` in seconds or ISO-8601 (OAPI)."""
    ms = validation.first_duration_ms([body], name)
    return timedelta(milliseconds=ms) if ms is not None else None


def fetch_request(body: dict[str, Any]) -> dict[str, Any]:
    """``{queues, count?, worker_id?, visibility_timeout_ms?}`` (HB §10.1) → fetch kwargs.

    Fair scheduling adds ``pool`` (§6.2: the worker's pool; its queues and strategy are
    the server's, §5.2, so ``queues`` may be left out) and ``strategy`` with ``weights``
    (§5.2: the worker's own preferences, for a worker in no pool).
    """
    pool = body.get("pool")
    queues = body.get("queues")
    if queues is None and isinstance(body.get("queue"), str):
        queues = [body["queue"]]  # OpenAPI's single-queue form
    if queues is None and pool is None:
        raise ValidationError("queues is required (an array of queue names)", field="queues")
    if queues is not None:
        queues = validation.validate_queues(queues)
    count = validation.validate_fetch_count(body.get("count", 1))
    out: dict[str, Any] = {
        "queues": queues,
        "count": count,
        "worker_id": validation.validate_worker_id(body.get("worker_id")),
        "visibility_timeout": _duration(body, "visibility_timeout"),
    }
    if pool is not None:
        out["pool"] = validation.validate_pool_name(pool)
    elif body.get("strategy") is not None or body.get("weights") is not None:
        weights = body.get("weights")
        strategy = body.get("strategy") or (scheduling.WEIGHTED if weights else None)
        out["policy"] = scheduling.policy(queues, strategy=strategy, weights=weights)
    return out


def ack_request(body: dict[str, Any]) -> dict[str, Any]:
    """``{job_id, result?, worker_id?}`` (HB §10.2); ``result`` may be any JSON value."""
    return {
        "job_id": job_id(body),
        "result": body.get("result"),
        "worker_id": validation.validate_worker_id(body.get("worker_id")),
    }


def nack_request(body: dict[str, Any]) -> dict[str, Any]:
    """``{job_id, error, worker_id?, requeue?}`` (HB §10.3, OpenAPI ``requeue``).

    ``error`` is ``{code, message, retryable?, details?}`` (HB), or core's ``{type,
    message, backtrace}``, or a plain message string; ``failure.entry`` merges them.
    """
    error = body.get("error")
    if error is None:
        error = {}
    if not isinstance(error, dict | str):
        raise ValidationError("error must be an object", field="error")
    requeue = body.get("requeue", False)
    if not isinstance(requeue, bool):
        raise ValidationError("requeue must be a boolean", field="requeue")
    return {
        "job_id": job_id(body),
        "error": error,
        "worker_id": validation.validate_worker_id(body.get("worker_id")),
        "requeue": requeue,
    }


def heartbeat_request(body: dict[str, Any]) -> dict[str, Any]:
    """BEAT in the HB form and the worker-protocol form (digest §1.5.6).

    ``active_jobs`` is a list of ids (HB) or a count (worker protocol, ids then in
    ``active_job_ids``); OpenAPI's single ``job_id`` is accepted too.
    """
    worker_id = validation.validate_worker_id(body.get("worker_id"), required=True)
    ids: list[Any] = []
    active = body.get("active_jobs")
    if isinstance(active, list):
        ids.extend(validation.validate_strings(active, "active_jobs") or [])
    elif active is not None and (isinstance(active, bool) or not isinstance(active, int)):
        raise ValidationError(
            "active_jobs must be an array of job ids (or a count, with active_job_ids)",
            field="active_jobs",
        )
    if body.get("active_job_ids") is not None:
        ids.extend(validation.validate_strings(body["active_job_ids"], "active_job_ids") or [])
    single = _string(body, "job_id")
    if single:
        ids.append(single)
    out: dict[str, Any] = {
        "worker_id": worker_id,
        "active_job_ids": list(dict.fromkeys(ids)),
        "visibility_timeout": _duration(body, "visibility_timeout"),
    }
    state = validation.validate_worker_state(body.get("state"))
    if state is not None:
        out["state"] = state
    if body.get("hostname") is not None:
        out["hostname"] = validation.validate_hostname(body["hostname"])
    for name in ("pid", "concurrency"):
        value = validation.validate_non_negative(body.get(name), name)
        if value is not None:
            out[name] = value
    if body.get("queues") is not None:
        out["queues"] = validation.validate_queues(body["queues"], allow_empty=True)
    if body.get("labels") is not None:
        out["labels"] = validation.validate_strings(body["labels"], "labels")
    if body.get("pool") is not None:  # fair scheduling §6.2: the pool it belongs to
        out["pool"] = validation.validate_pool_name(body["pool"])
    as_of = _as_of(body.get("as_of"))
    if as_of is not None:
        out["as_of"] = as_of
    return out


#: How far apart the clocks of the web processes may be. An HTTP worker's ``as_of`` comes
#: from the process that answered one request and its claims were stamped by those that
#: answered its fetches: only claims older than ``as_of`` minus this are released, so a
#: fetch in flight is never taken for a lost one while the clocks agree within it (NTP
#: keeps them within milliseconds). It costs a lost claim one more heartbeat at most.
AS_OF_CLOCK_SKEW = timedelta(seconds=1)


def _as_of(value: Any) -> datetime | None:
    """The ``as_of`` extension field of a heartbeat: a time *the server* sent (a heartbeat
    reply's ``server_time``, a fetched job's ``started_at``), never the worker's own clock.
    Returned less :data:`AS_OF_CLOCK_SKEW`; later than the server's now by more than that,
    it cannot be one of those: refused, not clamped."""
    if value is None:
        return None
    if not isinstance(value, str) or value.startswith("+"):
        raise ValidationError(
            "as_of must be an RFC 3339 timestamp the server sent (server_time, started_at)",
            field="as_of",
        )
    when = envelope.parse_timestamp(value, "as_of")
    if when > timezone.now() + AS_OF_CLOCK_SKEW:
        raise ValidationError(
            "as_of is later than the server's time: send a timestamp the server sent "
            "(server_time, started_at), not the worker's clock",
            field="as_of",
        )
    return when - AS_OF_CLOCK_SKEW


def progress_request(body: dict[str, Any], job_id_from_path: str | None = None) -> dict[str, Any]:
    """Progress of an active job: ``{job_id, percentage: 0-100, message?, data?}`` (SDK) or
    ``{progress: 0.0-1.0, data?}`` (progress extension §4); clamped to the range."""
    if "progress" in body:
        value, name, scale = body["progress"], "progress", 1.0
    else:
        value, name, scale = body.get("percentage"), "percentage", 100.0
    # progress extension §5: out-of-range values are clamped
    progress = validation.validate_progress(
        value, body.get("message"), body.get("data"), field=name, scale=scale
    )
    return {
        "job_id": job_id_from_path or job_id(body),
        "value": progress.value,
        "message": progress.message,
        "data": progress.data,
        "worker_id": validation.validate_worker_id(body.get("worker_id")),
    }


def batch_request(body: dict[str, Any]) -> list[Any]:
    """``{jobs: [enqueue request, ...]}`` (HB §9.2): at least one job."""
    jobs = body.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise ValidationError("jobs must be a non-empty array of job requests", field="jobs")
    return jobs


def retry_override(body: dict[str, Any]) -> dict[str, Any] | None:
    """DLQ §6.3's optional ``{override: {queue?, meta?, retry?}}``."""
    override = body.get("override")
    if override is None:
        return None
    if not isinstance(override, dict):
        raise ValidationError("override must be an object", field="override")
    unknown = set(override) - {"queue", "meta", "retry"}
    if unknown:
        raise ValidationError(
            f"override may only set queue, meta and retry (not {', '.join(sorted(unknown))})",
            field="override",
        )
    return override


# --------------------------------------------------------------------------- responses

ts = envelope.format_timestamp


def job(job: Job) -> dict[str, Any]:
    """The complete OJS job object, plus what the last operation reported about it."""
    out = job.to_wire()
    delay = getattr(job, "retry_delay_ms", None)
    if delay is None and isinstance(job.error, dict):
        delay = job.error.get("retry_delay_ms")
    if delay is not None and job.state != "completed":
        out["retry_delay_ms"] = delay
    previous = getattr(job, "previous_state", None)
    if previous is not None:
        out["previous_state"] = str(previous)
    for name in ("activated_at", "re_enqueued_at"):
        value = getattr(job, name, None)
        if value is not None:
            out[name] = ts(value)
    return out


#: The columns an ACK's answer reads: the job's other columns are not loaded for it.
ACK_FIELDS = ("state", "completed_at")


def ack_result(settled: Job) -> dict[str, Any]:
    """HB §10.2 ``{acknowledged, job_id, state, completed_at}`` plus ``id`` (conformance).

    No ``job``: OpenAPI's ``AckResponse.job`` is optional, and HB §10.2 has none. A
    worker sends an ACK per job, and loading its 45 columns and rendering the envelope
    served an answer no worker reads (``GET /jobs/{id}`` has the whole job).
    """
    return {
        "acknowledged": True,
        "job_id": str(settled.id),
        "id": str(settled.id),
        "state": str(settled.state),
        "completed_at": ts(settled.completed_at),
    }


def nack_result(settled: Job) -> dict[str, Any]:
    """HB §10.3 ``{job_id, state, attempt, max_attempts, next_attempt_at | discarded_at}``.

    Also ``id``, ``retry_delay_ms``, ``completed_at`` for discarded jobs, and ``job``.
    """
    out: dict[str, Any] = {
        "job_id": str(settled.id),
        "id": str(settled.id),
        "state": str(settled.state),
        "attempt": settled.attempt,
        "max_attempts": settled.max_attempts,
    }
    if settled.state == "retryable":
        out["next_attempt_at"] = ts(settled.next_attempt_at)
        delay = getattr(settled, "retry_delay_ms", None)
        if delay is not None:
            out["retry_delay_ms"] = delay
    elif settled.state == "discarded":
        out["discarded_at"] = ts(settled.discarded_at)
        out["completed_at"] = ts(settled.completed_at)
        out["dead_letter"] = settled.dead_letter
    out["job"] = job(settled)
    return out


def heartbeat(beat: Heartbeat) -> dict[str, Any]:
    """HB §10.4 ``{state, jobs_extended, server_time}`` plus OpenAPI's ``directive``."""
    return {
        "worker_id": beat.worker_id,
        "state": beat.state,
        "directive": beat.directive,
        "jobs_extended": beat.jobs_extended,
        "cancelled_jobs": beat.cancelled_jobs,
        "server_time": ts(beat.server_time),
    }


def queue(info: QueueInfo) -> dict[str, Any]:
    """A queue as HB §11.1 lists it (``status``) and as the suites read it (``paused``)."""
    out: dict[str, Any] = {
        "name": info.name,
        "status": "paused" if info.paused else "active",
        "paused": info.paused,
        "created_at": ts(info.created_at),
    }
    if info.limits:
        out["limits"] = info.limits
    if info.paused_at is not None:
        out["paused_at"] = ts(info.paused_at)
    return out


def queue_stats(info: QueueInfo, counts: dict[str, int], computed_at: Any) -> dict[str, Any]:
    """Queue statistics: counts by state, under ``queue`` (suites) and ``stats`` (HB §11.2)."""
    stats = dict(counts)
    stats["depth"] = counts.get("available", 0)
    stats["total"] = sum(counts.values())
    body = {**queue(info), **stats}
    return {
        "queue": body,
        "name": info.name,
        "status": body["status"],
        "stats": {**stats, "queue": info.name},
        "computed_at": ts(computed_at),
    }


def event(row: Event) -> dict[str, Any]:
    """An event envelope (events §2) with the conformance fields (``job_id``, ``queue``...)."""
    out = row.to_wire()
    if row.job_id is not None:
        out["job_id"] = str(row.job_id)
    if row.queue:
        out["queue"] = row.queue
    out["timestamp"] = out["time"]
    if isinstance(row.data, dict) and "state" in row.data:
        out["state"] = row.data["state"]
    return out


# --------------------------------------------------------------------------- workflows

WORKFLOW_KINDS = ("chain", "group", "batch")
WORKFLOW_CALLBACKS = ("on_complete", "on_success", "on_failure")


def workflow_request(
    body: dict[str, Any], path: str = "", inherited: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``POST /workflows`` → ``{kind, name, jobs, callbacks, metadata}`` (raw job bodies).

    Accepts the workflows spec and suites' ``{type, name, steps | jobs, callbacks}`` and the
    HTTP binding's ``{name, steps[{id, type, args, depends_on, options}], options}``; a
    binding graph is a group when no step depends on another and a chain when each step
    depends on exactly the one before it (other graphs: DAGs, workflows §15, are refused).
    Workflow-level ``options`` are defaults for every job's ``options``, nested ones
    included. A member ``{"type": "chain"|"group"|"batch", "steps"|"jobs": [...]}`` is a
    nested workflow (§10), parsed the same way: ``{"workflow": {...}}`` in ``jobs``.
    """
    at = f"{path}." if path else ""
    kind = body.get("type")
    steps = body.get("steps")
    jobs = body.get("jobs")
    if kind is None and not path:
        kind = _binding_kind(steps)
    if kind not in WORKFLOW_KINDS:
        raise ValidationError(f"type must be one of {', '.join(WORKFLOW_KINDS)}", field=f"{at}type")
    field = "steps" if kind == "chain" else "jobs"
    items = steps if kind == "chain" else (jobs if jobs is not None else steps)
    if not isinstance(items, list) or not items:
        raise ValidationError(f"{field} must be a non-empty array of jobs", field=f"{at}{field}")
    options = body.get("options")
    if options is not None and not isinstance(options, dict):
        raise ValidationError("options must be an object", field=f"{at}options")
    defaults = {**(inherited or {}), **(options or {})}
    callbacks = body.get("callbacks") or {}
    if not isinstance(callbacks, dict):
        raise ValidationError("callbacks must be an object", field=f"{at}callbacks")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 255):
        raise ValidationError("name must be a string of at most 255 characters", field=f"{at}name")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise ValidationError("metadata must be an object", field=f"{at}metadata")
    members: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{at}{field}[{i}]"
        if _is_nested(item):
            members.append({"workflow": workflow_request(item, where, defaults)})
        else:
            members.append(_with_defaults(item, defaults, where))
    return {
        "kind": kind,
        "field": field,
        "name": validation.check_text(name, f"{at}name") if name else "",
        "jobs": members,
        "callbacks": {
            key: _with_defaults(value, defaults, f"{at}callbacks.{key}")
            for key, value in callbacks.items()
            if value is not None
        },
        "metadata": metadata or {},
    }


def _is_nested(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") in WORKFLOW_KINDS
        and ("steps" in item or "jobs" in item)
    )


def _binding_kind(steps: Any) -> str:
    if not isinstance(steps, list) or not steps:
        raise ValidationError("steps must be a non-empty array of jobs", field="steps")
    ids = [s.get("id") if isinstance(s, dict) else None for s in steps]
    needs = [s.get("depends_on") or [] if isinstance(s, dict) else [] for s in steps]
    if all(not n for n in needs):
        return "group" if any(i is not None for i in ids) else "chain"
    if not needs[0] and all(n == [ids[i - 1]] for i, n in enumerate(needs) if i > 0):
        return "chain"
    raise ValidationError(
        "Only chains (each step depends on the one before) and groups (no dependencies) "
        "are supported; general dependency graphs are not.",
        field="steps",
    )


def _with_defaults(item: Any, defaults: dict[str, Any] | None, field: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ValidationError(f"{field} must be a job object", field=field)
    # A binding step's ``id`` names the step, not the job: dropped with ``depends_on``.
    dropped = {"depends_on", "id"} if "depends_on" in item else set()
    out: dict[str, Any] = {k: v for k, v in item.items() if k not in dropped}
    if "args" not in out:
        out["args"] = []
    if defaults:
        options = out.get("options")
        if options is not None and not isinstance(options, dict):
            raise ValidationError(f"{field}.options must be an object", field=f"{field}.options")
        out["options"] = {**defaults, **(options or {})}
    return out


def workflow(wf: Any, jobs: list[Job], nested: list[Any] | None = None) -> dict[str, Any]:
    """A workflow with each step's state: the spec's, the binding's and the suites' fields.

    ``jobs`` are the jobs of ``wf`` and of the workflows nested in it (``nested``, any
    depth); a nested member is shown as a step with its own steps (§10).
    """
    tree = _Tree(jobs, nested or [])
    return tree.render(wf)


class _Tree:
    def __init__(self, jobs: list[Job], nested: list[Any]) -> None:
        self.jobs: dict[Any, list[Job]] = {}
        for job in sorted(jobs, key=lambda j: j.id):
            self.jobs.setdefault(job.workflow_id, []).append(job)
        self.children: dict[Any, list[Any]] = {}
        for child in sorted(nested, key=lambda w: w.id):
            if child.parent_id is not None:
                self.children.setdefault(child.parent_id, []).append(child)

    def members(self, wf: Any) -> dict[int, Any]:
        """Member index → newest job or nested workflow (a resumed chain leaves history)."""
        rows = [
            (job.workflow_step, job.id, job)
            for job in self.jobs.get(wf.id, [])
            if job.workflow_step is not None and job.workflow_step >= 0
        ]
        rows += [(c.parent_step or 0, c.id, c) for c in self.children.get(wf.id, [])]
        newest: dict[int, Any] = {}
        for index, _, node in sorted(rows, key=lambda row: (row[0], row[1])):
            newest[index] = node
        return dict(sorted(newest.items()))

    def counts(self, wf: Any) -> tuple[int, int, int]:
        """§3.3 ``job_count``/``completed_count``/``failed_count``, nested jobs included."""
        total = completed = failed = 0
        for node in self.members(wf).values():
            if isinstance(node, Job):
                total += 1
                completed += node.state == JobState.COMPLETED
                failed += node.state == JobState.DISCARDED
            else:
                t, c, f = self.counts(node)
                total, completed, failed = total + t, completed + c, failed + f
        return total, completed, failed

    def render(self, wf: Any, index: int | None = None) -> dict[str, Any]:
        ts = envelope.format_timestamp
        steps = [
            _step(i, node) if isinstance(node, Job) else self.render(node, i)
            for i, node in self.members(wf).items()
        ]
        by_id = {str(job.id): job for job in self.jobs.get(wf.id, [])}
        if self.children.get(wf.id):
            job_count, completed_count, failed_count = self.counts(wf)
        else:
            job_count, completed_count, failed_count = wf.total, wf.completed, wf.failed
        out: dict[str, Any] = {}
        if index is not None:
            out.update({"index": index, "workflow_id": str(wf.id)})
        out.update(
            {
                "id": str(wf.id),
                "type": wf.kind,
                "name": wf.name or None,
                "state": wf.state,
                "steps": steps,
                "created_at": ts(wf.created_at),
                "started_at": ts(wf.started_at),
                "finished_at": ts(wf.finished_at),
                "completed_at": ts(wf.finished_at) if wf.state in {"completed", "failed"} else None,
                "metadata": {
                    **(wf.metadata or {}),
                    "created_at": ts(wf.created_at),
                    "started_at": ts(wf.started_at),
                    "job_count": job_count,
                    "completed_count": completed_count,
                    "failed_count": failed_count,
                    "cancelled_count": wf.cancelled,
                },
            }
        )
        if wf.parent_id is not None and index is None:
            out["parent_workflow_id"] = str(wf.parent_id)
        if wf.result is not None:
            out["result"] = wf.result
        if wf.state == "cancelled":
            out["cancelled_at"] = ts(wf.finished_at)
        counts = {
            "total": wf.total,
            "completed": wf.completed,
            "failed": wf.failed,
            "cancelled": wf.cancelled,
        }
        prefix = "steps" if wf.kind == "chain" else "jobs"
        out.update({f"{prefix}_{name}": value for name, value in counts.items()})
        if wf.kind != "chain":
            out["jobs"] = steps
        if wf.callbacks:
            out["callbacks"] = {
                name: _step(None, by_id[job_id]) if job_id in by_id else {"job_id": job_id}
                for name, job_id in wf.callbacks.items()
            }
            out["callbacks_fired"] = list(wf.fired or [])
        if wf.error:
            out["error"] = wf.error
        return out


def _step(index: int | None, job: Job) -> dict[str, Any]:
    ts = envelope.format_timestamp
    step: dict[str, Any] = {
        "index": index,
        "type": job.type,
        "state": str(job.state),
        "job_id": str(job.id),
        "queue": job.queue,
    }
    optional = {
        "started_at": ts(job.started_at),
        "completed_at": ts(job.completed_at),
        "result": job.result,
        "error": job.error,
    }
    step.update({k: v for k, v in optional.items() if v is not None})
    return step
