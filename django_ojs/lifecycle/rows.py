"""The rows a push inserts: a validated spec, its job row, the allowed-types rule.

Shared by plain pushes (:mod:`.push`) and workflows (:mod:`.workflows`), below both.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from django_ojs import envelope, ids, middleware, validation
from django_ojs.conf import settings
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import TenantRequired, ValidationError
from django_ojs.models import Job, unsaved_job, unsaved_jobs
from django_ojs.policy import default_retry_policy, ms_delta
from django_ojs.retry import RetryPolicy
from django_ojs.states import JobState
from django_ojs.tenancy import tenant_of


def _earliest(*values: datetime | None) -> datetime | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


#: Every concrete field of a job, None: what a row is made from (a field left out of an
#: instance's ``__dict__`` would read as deferred, and load from the database).
_BLANK = dict.fromkeys(f.attname for f in Job._meta.concrete_fields)


def job_row(spec: JobSpec, now: datetime, default_max_attempts: int) -> Job:
    """The unsaved row a push inserts for ``spec`` (its state follows the schedule)."""
    return unsaved_job(_values(spec, now, default_max_attempts, spec.id or ids.uuid7()))


def job_rows(
    specs: Sequence[JobSpec],
    now: datetime,
    default_max_attempts: int,
    plain: Collection[int] = (),
) -> list[Job]:
    """:func:`job_row` of each of ``specs``; the ids they lack are made in one go.

    ``plain``: the positions of specs with a type and arguments only, every other
    attribute its default (:func:`~django_ojs.envelope.unsized_plain`), as most of a
    bulk push's are. Their rows differ only in id, type and arguments: each is a copy
    of one row made for them all, with new empty containers: half the cost of making
    each row from its spec (1.0 against 2.1 µs a row, with its id and its ``Job``).
    """
    fresh = iter(ids.uuid7s(sum(1 for spec in specs if spec.id is None)))
    if not plain:
        return unsaved_jobs(
            [_values(spec, now, default_max_attempts, spec.id or next(fresh)) for spec in specs]
        )
    template = _values(JobSpec(type=""), now, default_max_attempts, None)
    empty = [(k, type(v)) for k, v in template.items() if isinstance(v, dict | list) and not v]
    made = _template(template)[1]  # defaults a callable makes: one per row
    rows = []
    for position, spec in enumerate(specs):
        if position not in plain:
            rows.append(_values(spec, now, default_max_attempts, spec.id or next(fresh)))
            continue
        row = template.copy()
        for key, kind in empty:  # no two jobs share a container
            row[key] = kind()
        for field in made:
            row[field.attname] = field.get_default()
        row["id"], row["type"], row["args"] = spec.id or next(fresh), spec.type, spec.args
        rows.append(row)
    return unsaved_jobs(rows)


_PENDING, _SCHEDULED = JobState.PENDING.value, JobState.SCHEDULED.value
_AVAILABLE = JobState.AVAILABLE.value


def _values(spec: JobSpec, now: datetime, default_max_attempts: int, id_: Any) -> dict[str, Any]:
    """Every concrete field of the row ``spec`` makes (with id ``id_``), by attname."""
    if spec.pending:  # digest §8.34: pending wins over a future scheduled_at
        state = _PENDING
    elif spec.scheduled_at is not None and spec.scheduled_at > now:
        state = _SCHEDULED
    else:
        state = _AVAILABLE
    policy = spec.retry
    deadline = now + ms_delta(spec.total_timeout_ms) if spec.total_timeout_ms else None
    if spec.expires_at is None and not spec.enqueue_ttl_ms and deadline is None:
        stale = None  # most jobs: nothing makes them stale
    else:
        ttl = now + ms_delta(spec.enqueue_ttl_ms) if spec.enqueue_ttl_ms else None
        stale = _earliest(spec.expires_at, ttl, deadline)
    values = {
        "id": id_,
        "type": spec.type,
        "queue": spec.queue,
        "args": spec.args,
        "meta": spec.meta,
        "priority": spec.priority,
        "state": state,
        "attempt": 0,
        "max_attempts": policy.max_attempts if policy else default_max_attempts,
        "retry": policy.to_wire() if policy else None,
        "unique": spec.unique,
        "unique_key": spec.unique_key,
        "rate_limit": spec.rate_limit,
        "rate_key": spec.rate_key,
        "schema": spec.schema,
        "tags": spec.tags,
        "tenant": tenant_of(spec.meta),
        "extra": spec.extra,
        "timeout_ms": spec.timeout_ms,
        "visibility_timeout_ms": spec.visibility_timeout_ms,
        "total_timeout_ms": spec.total_timeout_ms,
        "enqueue_ttl_ms": spec.enqueue_ttl_ms,
        "grace_period_ms": spec.grace_period_ms,
        "heartbeat_timeout_ms": spec.heartbeat_timeout_ms,
        "result_ttl": None if spec.result_ttl is None else _result_ttl(spec.result_ttl),
        "scheduled_at": spec.scheduled_at,
        "expires_at": spec.expires_at,
        "created_at": now,
        "enqueued_at": now,
        "errors": [],
        "dead_letter": False,
        "deadline_at": deadline,
        "stale_at": stale,
    }
    template, made_defaults = _template(values)
    row = template.copy()
    row.update(values)
    for field in made_defaults:  # a default made by a callable: one per row
        row[field.attname] = field.get_default()
    return row


#: What :func:`_values` starts each row from: every concrete field None, or its
#: default when :func:`_values` leaves it to that (fields added later still get
#: theirs); and the fields among those whose default a callable makes.
_start: tuple[dict[str, Any], list[Any]] | None = None


def _template(values: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    global _start
    if _start is None:
        left = [f for f in Job._meta.concrete_fields if f.has_default() and f.attname not in values]
        template = {
            **_BLANK,
            **{f.attname: f.get_default() for f in left if not callable(f.default)},
        }
        _start = (template, [f for f in left if callable(f.default)])
    return _start


def _result_ttl(seconds: int | None) -> timedelta | None:
    if seconds is None:
        return None
    return timedelta(seconds=envelope.MAX_RESULT_TTL if seconds == -1 else seconds)


def through_middleware(spec: JobSpec) -> JobSpec | None:
    """``spec`` as the enqueue middleware leaves it (middleware §3), ``None`` if dropped.

    The id is set first, so every middleware sees the job's final id (§3.4). What a
    middleware changed is checked again like the caller's input: it is code, but a
    mistake there must not write a job the store cannot hold.
    """
    chain = middleware.enqueue_chain()
    if not chain.enqueue_needed():
        return spec
    if spec.id is None:
        spec = replace(spec, id=ids.uuid7())
    out = chain.run_enqueue(spec, _keep)
    if out is None or out is spec:
        return out
    if not isinstance(out, JobSpec):
        raise middleware.MiddlewareError(
            f"Enqueue middleware returned {type(out).__name__}, not a JobSpec or None."
        )
    validation.validate_queue(out.queue)
    validation.check_string(out.type, "type", max_length=255)
    validation.check_json(out.args, "args")
    validation.validate_meta(out.meta)
    return out


def _keep(spec: JobSpec) -> JobSpec:
    return spec


def check_types(specs: list[JobSpec]) -> None:
    """Refuse job types outside ``OJS_ALLOWED_JOB_TYPES`` (OJS security §8.1), HTTP or not."""
    allowed = settings.ALLOWED_JOB_TYPES
    if allowed is None:
        return
    for index, spec in enumerate(specs):
        try:
            validation.validate_allowed_type(spec.type, allowed)
        except ValidationError as exc:
            if len(specs) > 1:
                exc.details["index"] = index
                exc.message = f"jobs[{index}]: {exc.message}"
                exc.args = (exc.message,)
            raise


def check_tenants(specs: list[JobSpec]) -> None:
    """Refuse jobs without a tenant when ``OJS_TENANT_REQUIRED`` (multi-tenancy §5.1)."""
    if not settings.TENANT_REQUIRED:
        return
    for index, spec in enumerate(specs):
        if not tenant_of(spec.meta):
            exc = TenantRequired()
            if len(specs) > 1:
                exc.details["index"] = index
                exc.message = f"jobs[{index}]: {exc.message}"
                exc.args = (exc.message,)
            raise exc


def build_spec(
    type: Any,
    args: Any,
    options: dict[str, Any],
    *,
    max_bytes: int | None = None,
    retry_base: RetryPolicy | None = None,
) -> JobSpec:
    max_bytes = settings.MAX_ENVELOPE_BYTES if max_bytes is None else max_bytes
    if not options:
        return envelope.build_plain(type, args, max_bytes=max_bytes)
    return envelope.build(
        type,
        args,
        max_bytes=max_bytes,
        retry_base=default_retry_policy() if retry_base is None else retry_base,
        **options,
    )
