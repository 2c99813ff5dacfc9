"""Job search: one filter for the admin API, the HTTP list endpoints and the Django admin.

``JobFilter.parse(params)`` validates a filter given as query parameters or a JSON object
(admin API §7.1, §8): ``state`` (one or a comma list), ``queue``, ``tenant`` (the job's
``meta.tenant_id``), ``type`` (exact, or a
prefix with ``*``: ``email.*``), ``since``/``until`` (created), ``finished_before``/
``finished_after``, ``worker`` (worker id), ``error_type`` (type of the last error),
``args``/``meta`` (a JSON fragment the job's args or meta contain). Bad values raise
:class:`ValidationError` naming the parameter.

Unknown parameters are refused (a misspelt ``queu`` must not widen a bulk action to every
job); callers name the extra parameters they read themselves (``page``, ``sort``...).

Containment (``args``, ``meta``) is ``@>`` on PostgreSQL (``Driver.json_contains``; SQLite
runs the same rule in a function of its own). No GIN index is created by the migrations
(it slows every insert); :func:`search_indexes` (``manage.py ojs_search_index --create``)
adds the two on demand. Without them the other filters should narrow the rows first.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from django_ojs import envelope, states, validation
from django_ojs.drivers import get_driver
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job
from django_ojs.tenancy import validate_tenant

SORTS = {"created_at": "created_at", "scheduled_at": "scheduled_at", "priority": "priority"}


@dataclass(frozen=True)
class JobFilter:
    states: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    tenant: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    worker: str | None = None
    error_type: str | None = None
    args: Any = None
    meta: dict[str, Any] | None = None
    dead_letter: bool | None = None

    @classmethod
    def parse(cls, params: Mapping[str, Any], *, extra: Iterable[str] = ()) -> JobFilter:
        """Validate ``params``; ``extra``: other keys the caller reads (refused otherwise)."""
        accepted = PARAMETERS | frozenset(extra)
        unknown = sorted(str(k) for k in params if k not in accepted)
        if unknown:
            raise ValidationError(
                f"Unknown filter '{unknown[0]}' (known: {', '.join(sorted(PARAMETERS))})",
                field=unknown[0],
            )

        def text(name: str) -> str | None:
            value = params.get(name)
            if value is None or value == "":
                return None
            if not isinstance(value, str):
                raise ValidationError(f"{name} must be a string", field=name)
            return validation.check_text(value, name)

        def when(name: str) -> datetime | None:
            value = text(name)
            return envelope.parse_timestamp(value, name) if value else None

        def fragment(name: str, kind: type) -> Any:
            value = params.get(name)
            if value is None or value == "":
                return None
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except (ValueError, RecursionError):
                    raise ValidationError(f"{name} must be JSON", field=name) from None
            if not isinstance(value, kind):
                raise ValidationError(
                    f"{name} must be a JSON {'array' if kind is list else 'object'}", field=name
                )
            return validation.check_json(value, name)

        raw_states = params.get("state", params.get("states"))
        wanted: tuple[str, ...] = ()
        if raw_states:
            items = raw_states.split(",") if isinstance(raw_states, str) else raw_states
            if not isinstance(items, list | tuple):
                raise ValidationError("state must be a state or a list of states", field="state")
            known = {s.value for s in states.JobState}
            for item in items:
                if not isinstance(item, str) or item not in known:
                    raise ValidationError(
                        f"state must be one of {', '.join(sorted(known))}", field="state"
                    )
            wanted = tuple(items)
        queue = text("queue")
        tenant = text("tenant")
        kind = text("type")
        if kind is not None and "*" in kind.rstrip("*"):
            raise ValidationError("type takes one trailing * (a prefix: email.*)", field="type")
        return cls(
            states=wanted,
            queue=validation.validate_queue(queue) if queue else None,
            type=kind,
            tenant=validate_tenant(tenant, field="tenant") if tenant else None,
            since=when("since"),
            until=when("until"),
            finished_after=when("finished_after"),
            finished_before=when("finished_before"),
            worker=text("worker"),
            error_type=text("error_type"),
            args=fragment("args", list),
            meta=fragment("meta", dict),
        )

    @property
    def empty(self) -> bool:
        return self == JobFilter()

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        """``jobs`` narrowed to this filter."""
        q = Q()
        if self.states:
            q &= Q(state__in=self.states)
        if self.queue:
            q &= Q(queue=self.queue)
        if self.tenant:
            q &= Q(tenant=self.tenant) & ~Q(tenant="")  # ojs_job_tenant_idx
        if self.type:
            q &= (
                Q(type__startswith=self.type[:-1]) if self.type.endswith("*") else Q(type=self.type)
            )
        if self.since:
            q &= Q(created_at__gte=self.since)
        if self.until:
            q &= Q(created_at__lt=self.until)
        finished = (
            Q(completed_at__isnull=False)
            | Q(discarded_at__isnull=False)
            | Q(cancelled_at__isnull=False)
        )
        for bound, op in ((self.finished_after, "gte"), (self.finished_before, "lt")):
            if bound is not None:
                q &= finished & (
                    Q(**{f"completed_at__{op}": bound})
                    | Q(**{f"discarded_at__{op}": bound})
                    | Q(**{f"cancelled_at__{op}": bound})
                )
        if self.worker:
            q &= Q(worker_id=self.worker)
        if self.error_type:
            q &= Q(error__type=self.error_type)
        if self.dead_letter is not None:
            q &= Q(dead_letter=self.dead_letter)
        jobs = jobs.filter(q)
        if self.args is None and self.meta is None:
            return jobs
        driver = get_driver(jobs.db)
        for column, fragment in (("args", self.args), ("meta", self.meta)):
            if fragment is not None:
                jobs = driver.json_contains(jobs, column, fragment)
        return jobs


#: The keys :meth:`JobFilter.parse` reads.
PARAMETERS = frozenset(
    {"state", "states", "queue", "tenant", "type", "since", "until", "finished_after", "finished_before",
     "worker", "error_type", "args", "meta"}
)  # fmt: skip


def order(jobs: QuerySet[Job], params: Mapping[str, Any]) -> QuerySet[Job]:
    """Admin API §7.1 ``sort`` (created_at, scheduled_at, priority) and ``order``."""
    sort = params.get("sort") or "created_at"
    direction = params.get("order") or "desc"
    if sort not in SORTS:
        raise ValidationError(f"sort must be one of {', '.join(SORTS)}", field="sort")
    if direction not in {"asc", "desc"}:
        raise ValidationError("order must be asc or desc", field="order")
    prefix = "-" if direction == "desc" else ""
    return jobs.order_by(f"{prefix}{SORTS[sort]}", f"{prefix}id")


#: Distinct values a filter menu lists at most.
MAX_CHOICES = 200


def distinct_types(jobs: QuerySet[Job]) -> list[str]:
    """The job types present, for a filter menu, without reading every row (at most
    :data:`MAX_CHOICES`; PostgreSQL skips along ``ojs_job_type_idx``)."""
    return get_driver(jobs.db).distinct_types(jobs, MAX_CHOICES)


def search_indexes(*, create: bool | None = None, using: str) -> dict[str, bool] | None:
    """The optional GIN indexes on ``args``/``meta`` (PostgreSQL): name → exists.

    ``create=True`` builds the missing ones without blocking writes, ``False`` drops
    them, ``None`` reports. ``None`` on databases without them (SQLite).
    """
    return get_driver(using).search_indexes(create=create)


#: Up to this many rows :func:`count` is exact.
EXACT_COUNT_LIMIT = 10_000


def count(jobs: QuerySet[Any]) -> tuple[int, bool]:
    """``(n, estimated)``: how many rows ``jobs`` has, never counting a million of them.

    Exact up to :data:`EXACT_COUNT_LIMIT` rows; above that PostgreSQL's planner estimates
    the same query (``EXPLAIN``, no rows read) and ``estimated`` is True. SQLite always
    counts exactly.
    """
    return get_driver(jobs.db).count(jobs, EXACT_COUNT_LIMIT)


def after_cursor(jobs: QuerySet[Job], cursor: str | None) -> QuerySet[Job]:
    """Keyset pagination, newest first: the jobs of ``jobs`` older than job ``cursor``.

    Job ids are UUIDv7, so id order is creation order and the primary key index serves
    ``ORDER BY id DESC`` from any point: a deep page costs what the first one does,
    where ``OFFSET`` reads and drops every row before it.
    """
    ordered = jobs.order_by("-id")
    if not cursor:
        return ordered
    try:
        return ordered.filter(id__lt=uuid.UUID(cursor))
    except ValueError:
        raise ValidationError("cursor must be a job id from next_cursor", field="cursor") from None
