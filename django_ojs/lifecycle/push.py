"""PUSH (OJS core §7.1): create jobs in the caller's transaction, single or all-or-nothing batch.

``enqueue``/``enqueue_many`` are the Python API: they validate keyword options with
``envelope.build`` and call :func:`push`/:func:`push_many`.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeGuard

from django.db import transaction
from django.utils import timezone

from django_ojs import middleware, tenancy
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import JobSpec, check_plain_size, plain_fit, unsized_plain
from django_ojs.envelope import build as envelope_build
from django_ojs.exceptions import (
    DuplicateJob,
    EnvelopeTooLarge,
    OJSError,
    TenantLimitExceeded,
    ValidationError,
)
from django_ojs.lifecycle import events, fairness, tenantlimits
from django_ojs.lifecycle.rows import (
    build_spec,
    check_tenants,
    check_types,
    job_row,
    job_rows,
    through_middleware,
)
from django_ojs.lifecycle.settle import cancel
from django_ojs.lifecycle.store import db
from django_ojs.models import Job
from django_ojs.policy import default_retry_policy, ms_delta
from django_ojs.states import JobState


def push_many(
    specs: Iterable[JobSpec], *, using: str | None = None, _middleware: bool = True
) -> list[Job]:
    """Create jobs atomically: all of them or none (OJS core §7.1, batch variant).

    Runs in the caller's transaction when there is one, so the jobs commit or roll back
    with the caller's own rows. Raises :class:`DuplicateJob` if a client-supplied id exists.
    Each job goes through the enqueue middleware first (middleware §9.1: one by one; an
    error aborts the whole batch, a drop leaves out that job only).
    """
    using = db(using)
    specs = list(specs)
    check_types(specs)
    now = timezone.now()
    default_max_attempts = default_retry_policy().max_attempts
    given_ids = {spec.id for spec in specs if spec.id is not None}
    if _middleware and middleware.enqueue_chain().enqueue_needed():
        kept = [through_middleware(spec) for spec in specs]
        survivors = [spec for spec in kept if spec is not None]
        if len(survivors) < len(specs):
            # Middleware §7.2: a dropped job is not written and is not an error; the
            # caller gets an unsaved job with ``dropped = True`` in its place.
            pushed = iter(push_many(survivors, using=using, _middleware=False))
            return [
                next(pushed) if out is not None else _dropped(spec, now, default_max_attempts)
                for spec, out in zip(specs, kept, strict=True)
            ]
        if any(out is not spec for spec, out in zip(specs, survivors, strict=True)):
            check_types(survivors)
        specs = survivors
    if not specs:
        return []
    if tenancy.current() is not None:
        specs = [_carried(spec) for spec in specs]
    check_tenants(specs)
    limits = tenantlimits.of_specs(specs, using)
    if limits:
        # Multi-tenancy §8: a limited tenant's push is counted against its limits, its
        # rows locked until the push commits (lifecycle.tenantlimits).
        specs = tenantlimits.boosted(specs, limits)
        try:
            with transaction.atomic(using=using):
                tenantlimits.admit(specs, limits, now, using)
                return _push(specs, given_ids, now, default_max_attempts, using)
        except TenantLimitExceeded as error:
            tenantlimits.refused(error, using)
            raise
    return _push(specs, given_ids, now, default_max_attempts, using)


def _push(
    specs: list[JobSpec], given_ids: set[Any], now: datetime, default_max_attempts: int, using: str
) -> list[Job]:
    given = [spec.id for spec in specs if spec.id in given_ids]
    if any(spec.unique_policy is not None for spec in specs):
        return _push_unique(specs, job_rows(specs, now, default_max_attempts), given, now, using)
    if len(specs) > 1 or given:
        return _push_batches(specs, now, using, given=given)
    # One atomic statement on PostgreSQL: no transaction of our own (a savepoint inside
    # the caller's transaction would add two round trips to the hot path).
    job = job_row(specs[0], now, default_max_attempts)
    if job.tenant:
        fairness.stamp([job], fairness.turns(fairness.keys_of_specs(specs), using))
    written = get_driver(using).push_one(
        job,
        available=job.state == JobState.AVAILABLE,
        now=now,
        events=events.mode(),
        source=settings.EVENT_SOURCE,
    )
    events.signal(written, using)
    return _saved([job], using)


#: How many jobs of a bulk push are made and sent at a time. The PostgreSQL driver sends
#: each batch in pipeline mode as soon as it is made, so the database writes one batch
#: while the next is made (and, for :func:`enqueue_many`, validated) here, and a push of
#: 100,000 jobs is not one statement with arrays of 100,000. On the project's 2-core
#: machine 1,000 jobs took as long in batches of 50 to 500, validated first or batch by
#: batch; 125 was kept.
PUSH_BATCH = 125


def _carried(spec: JobSpec) -> JobSpec:
    """``spec`` with the current tenant (``django_ojs.tenant``) when it names none."""
    meta = tenancy.carried(spec.meta)
    return spec if meta is None else replace(spec, meta=meta)


def _push_batches(
    items: Sequence[Any],
    now: datetime,
    using: str,
    *,
    given: Sequence[Any] = (),
    validate: bool = False,
) -> list[Job]:
    """Push ``items`` :data:`PUSH_BATCH` at a time, all or none: in one transaction (a
    savepoint inside the caller's), after refusing ``given`` ids already taken.

    ``items`` are specs, or with ``validate`` the items of :func:`enqueue_many`
    (:func:`_streamable`), each batch validated only when the driver asks for it. The
    PostgreSQL driver sends each batch as soon as it is made, so the database writes
    one batch while the next is validated and made here: validating all of them first
    kept it waiting for about 3 ms of every 1,000 jobs. An item found invalid raises as
    it would have before anything was sent, and what was sent rolls back.
    """
    rows: list[Job] = []
    with _collector_paused(len(items)), transaction.atomic(using=using):
        if given:
            _refuse_duplicates(list(given), using)
        # Where the tenants stand, read before the first batch goes (streamed items have
        # no tenant: see _streams).
        turns = None if validate else fairness.turns(fairness.keys_of_specs(items), using)
        written = get_driver(using).push_many(
            _batches(items, now, rows, validate=validate, turns=turns),
            now=now,
            events=events.mode(),
            source=settings.EVENT_SOURCE,
        )
    events.signal(written, using)
    return _saved(rows, using)


#: From how many jobs a push pauses the garbage collector (:func:`_collector_paused`).
PAUSE_COLLECTOR_FROM = 2 * PUSH_BATCH


@contextlib.contextmanager
def _collector_paused(size: int) -> Iterator[None]:
    """Python's cyclic garbage collector paused while a push of ``size`` jobs makes and
    sends its rows, when it has at least :data:`PAUSE_COLLECTOR_FROM`.

    The collector runs after every few hundred container objects made and kept, and now
    and then walks every object of the process. A pushed job is seven (the job, its
    ``__dict__``, its state, id, arguments, tags and errors): a bulk push kept it
    collecting, and with a Django process's objects to walk each time, that was a third
    of the push's Python time (3 of 10 µs a job, and more the larger the process). The
    push makes no reference cycles; reference counting still frees what it drops. Paused
    as Mercurial pauses it while it builds large containers (``util.nogc``). Left alone
    when the caller has turned the collector off; turned back on at the end otherwise,
    also when another thread turned it off meanwhile.
    """
    if size < PAUSE_COLLECTOR_FROM or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _batches(
    items: Sequence[Any],
    now: datetime,
    made: list[Job],
    *,
    validate: bool,
    turns: fairness.Turns | None = None,
) -> Iterator[list[Job]]:
    """The rows of ``items`` (:func:`job_rows`), :data:`PUSH_BATCH` at a time, each
    batch validated first (:func:`_specs`) when asked, and added to ``made``; the rows of
    tenants get their turns from ``turns`` (:func:`fairness.stamp`)."""
    default_max_attempts = default_retry_policy().max_attempts
    for start in range(0, len(items), PUSH_BATCH):
        chunk = items[start : start + PUSH_BATCH]
        plain: list[int] = []
        specs = _specs(chunk, start, plain) if validate else chunk
        rows = job_rows(specs, now, default_max_attempts, frozenset(i - start for i in plain))
        if turns:
            fairness.stamp(rows, turns)
        made.extend(rows)
        yield rows


def _push_unique(
    specs: list[JobSpec], rows: list[Job], given: list[Any], now: datetime, using: str
) -> list[Job]:
    """Push jobs of which some carry a unique policy (unique-jobs §5), all or none.

    The keys are locked first (:meth:`Driver.lock_keys`), so two pushes of one key run one
    after the other and the second sees the first's job: one job per key in the guarded
    states whatever the concurrency, also with several processes. The lock lasts until
    the caller's transaction ends.
    """
    driver = get_driver(using)
    with transaction.atomic(using=using):
        driver.lock_keys([spec.unique_key for spec in specs if spec.unique_key])
        if given:
            _refuse_duplicates(given, using)
        results: list[Job] = []
        inserts: list[Job] = []
        pending: dict[str, Job] = {}  # key -> the job of this batch that holds it
        for index, (spec, row) in enumerate(zip(specs, rows, strict=True)):
            rule, key = spec.unique_policy, spec.unique_key
            if rule is None or key is None:
                inserts.append(row)
                results.append(row)
                continue
            existing = pending.get(key)
            if existing is None or existing.state not in rule.states:
                existing = _holder(key, rule.states, rule.period_ms, now, using)
            if existing is None:
                pending[key] = row
                inserts.append(row)
                results.append(row)
                continue
            if rule.on_conflict == "reject":
                _reject(existing, key, index if len(specs) > 1 else None)
            if rule.on_conflict == "ignore":
                existing.deduplicated = True
                results.append(existing)
                continue
            # replace / replace_except_schedule (§5.2-5.3): the existing job is cancelled,
            # with its event, and the new one takes the key.
            if (
                rule.on_conflict == "replace_except_schedule"
                and existing.state == JobState.SCHEDULED
                and existing.scheduled_at is not None
            ):
                row.scheduled_at = existing.scheduled_at
                if not spec.pending:
                    scheduled = row.scheduled_at > now
                    row.state = (JobState.SCHEDULED if scheduled else JobState.AVAILABLE).value
            if existing in inserts:
                inserts.remove(existing)
                results[results.index(existing)] = row
            else:
                cancel(existing.id, reason=f"replaced by job {row.id} (unique key)", using=using)
            pending[key] = row
            inserts.append(row)
            results.append(row)
        if inserts:
            fairness.stamp(inserts, fairness.turns(fairness.keys_of_specs(specs), using))
            written = driver.push_many(
                [inserts],
                now=now,
                events=events.mode(),
                source=settings.EVENT_SOURCE,
            )
            events.signal(written, using)
    _saved(inserts, using)
    return results


def _holder(
    key: str, states: tuple[str, ...], period_ms: int | None, now: datetime, using: str
) -> Job | None:
    """The newest job holding ``key`` in one of ``states`` within ``period_ms`` (§6, §7)."""
    holders = Job.objects.using(using).filter(unique_key=key, state__in=states)
    if period_ms is not None:  # §7: measured from the existing job's created_at
        holders = holders.filter(created_at__gt=now - ms_delta(period_ms))
    return holders.order_by("-created_at").first()


def _reject(existing: Job, key: str, index: int | None) -> None:
    details: dict[str, Any] = {
        "existing_job_id": str(existing.id),
        "existing_job_state": existing.state,
        "unique_key": key,
        "uniqueness_key": key,
    }
    message = f"A job with the same unique key already exists: {existing.id} ({existing.state})."
    if index is not None:
        details["index"] = index
        message = f"jobs[{index}]: {message}"
    raise DuplicateJob(message, details=details)


def _dropped(spec: JobSpec, now: datetime, default_max_attempts: int) -> Job:
    row = job_row(spec, now, default_max_attempts)
    row.dropped = True
    return row


def _saved(rows: list[Job], using: str) -> list[Job]:
    for row in rows:
        row._state.adding = False
        row._state.db = using
    return rows


def _refuse_duplicates(given: list[Any], using: str) -> None:
    if len(set(given)) != len(given):
        raise DuplicateJob("The batch repeats a job id.", details={"ids": [str(i) for i in given]})
    existing = list(Job.objects.using(using).filter(id__in=given).values_list("id", flat=True))
    if existing:
        raise DuplicateJob(
            f"A job with id '{existing[0]}' already exists.",
            details={"existing_job_id": str(existing[0])},
        )


def push(spec: JobSpec, *, using: str | None = None) -> Job:
    """Create one job from a validated :class:`~django_ojs.envelope.JobSpec`."""
    return push_many([spec], using=using)[0]


def enqueue(
    type: str, args: Iterable[Any] = (), *, using: str | None = None, **options: Any
) -> Job:
    """Enqueue one job and return it.

    Writes through the caller's connection to the job database (``using``, else
    ``OJS_DATABASE``): inside ``transaction.atomic(using=that alias)`` the job commits or
    rolls back with the caller's rows on that database. When the jobs live in a database
    of their own, a ``transaction.atomic()`` on ``default`` does not cover the job: it
    commits at once (see docs/how-to/run-at-scale.md).

    Parameters
    ----------
    type:
        The job type, dot-namespaced (``"email.send"``).
    args:
        Positional arguments: a list of JSON-native values.
    options:
        OJS attribute names: ``queue``, ``priority``, ``scheduled_at`` and ``expires_at``
        (aware datetime, RFC 3339 string or ``timedelta`` from now), ``pending``, ``retry``
        (dict or :class:`~django_ojs.retry.RetryPolicy`), ``meta``, ``timeout``,
        ``visibility_timeout``, ``total_timeout``, ``enqueue_ttl``, ``grace_period`` and
        ``heartbeat_timeout`` (seconds or ``timedelta``), ``unique``, ``schema``, ``tags``,
        ``id`` (a UUIDv7).

    Raises
    ------
    ValidationError
        An option is invalid; ``exc.field`` names it.
    """
    return push(build_spec(type, args, options), using=using)


def enqueue_many(
    jobs: Iterable[Mapping[str, Any] | JobSpec], *, using: str | None = None
) -> list[Job]:
    """Enqueue several jobs atomically (all or none).

    Each item is a mapping with ``type``, optional ``args`` and any :func:`enqueue`
    option, or a :class:`~django_ojs.envelope.JobSpec`. A validation error names the
    failing item's index in ``exc.details["index"]``.
    """
    items = jobs if isinstance(jobs, list) else list(jobs)
    if _streamable(items):
        return _push_batches(items, timezone.now(), db(using), validate=True)
    return push_many(_specs(items, 0), using=using)


#: What an item of :func:`enqueue_many` may name: the job's type, its arguments and the
#: keyword options of :func:`enqueue` (``envelope.build``'s, less those it sets itself).
ITEM_KEYS = frozenset(inspect.signature(envelope_build).parameters) - {
    "max_bytes",
    "now",
    "retry_base",
}


def _specs(items: Sequence[Any], start: int, plain: list[int] | None = None) -> list[JobSpec]:
    """The validated specs of ``items``, the items of a push from index ``start`` on;
    an error names its item's index. The indexes of the items with a type and
    arguments only are added to ``plain``, when given."""
    max_bytes, retry_base = settings.MAX_ENVELOPE_BYTES, default_retry_policy()
    specs = []
    if plain is None:
        plain = []  # the items with a type and args only: their sizes are checked together
    for index, item in enumerate(items, start):
        try:
            if _is_plain(item):
                specs.append(unsized_plain(item["type"], item.get("args", ())))
                plain.append(index)
            elif isinstance(item, JobSpec):
                specs.append(item)
            elif item.__class__ is dict or isinstance(item, Mapping):  # ABC check: 0.3 µs
                options = dict(item)
                if "type" not in options:
                    raise ValidationError("type is required", field="type")
                unknown = options.keys() - ITEM_KEYS
                if unknown:
                    name = sorted(map(str, unknown))[0]
                    raise ValidationError(f"Unknown option '{name}'", field=name)
                specs.append(
                    build_spec(
                        options.pop("type"),
                        options.pop("args", ()),
                        options,
                        max_bytes=max_bytes,
                        retry_base=retry_base,
                    )
                )
            else:
                raise ValidationError("each job must be a mapping or a JobSpec", field="")
        except (ValidationError, EnvelopeTooLarge) as exc:
            _at(index, exc)
            raise
    unsized = [specs[index - start] for index in plain]
    if unsized and not plain_fit(unsized, max_bytes):
        for index, spec in zip(plain, unsized, strict=True):
            try:
                check_plain_size(spec, max_bytes)
            except EnvelopeTooLarge as exc:
                _at(index, exc)
                raise
    return specs


def _is_plain(item: Any) -> bool:
    """An item of :func:`enqueue_many` with a type and args only, as most are."""
    return item.__class__ is dict and "type" in item and item.keys() <= _PLAIN_KEYS


def _streams(item: Any) -> bool:
    """An item that may be validated batch by batch (:func:`_push_batches`): a dict with
    a type, without an id or a unique policy (both are checked against the whole push
    before it is written)."""
    if item.__class__ is not dict or "type" not in item or "id" in item or "unique" in item:
        return False
    meta = item.get("meta")
    return not (isinstance(meta, dict) and "tenant_id" in meta)  # a tenant's: see fairness


def _streamable(items: list[Any]) -> TypeGuard[list[dict[str, Any]]]:
    """True when ``items`` may be validated batch by batch (:func:`_push_batches`): two
    or more that each may (:func:`_streams`), with no enqueue middleware to run and no
    allowed-types rule to apply."""
    return (
        len(items) > 1
        and all(map(_streams, items))
        and settings.ALLOWED_JOB_TYPES is None
        and not settings.TENANT_REQUIRED
        and tenancy.current() is None
        and not middleware.enqueue_chain().enqueue_needed()
    )


_PLAIN_KEYS = frozenset({"type", "args"})


def _at(index: int, exc: OJSError) -> None:
    """Make ``exc`` the error of the batch's item ``index``, which it names."""
    exc.details["index"] = index
    exc.message = f"jobs[{index}]: {exc.message}"
    exc.args = (exc.message,)
