"""The engine contract: every operation whose SQL or strategy differs between databases.

``lifecycle`` keeps the rules (which transition, which error, which event); a driver keeps
the statements, and is the only code that knows which database it talks to (the
architecture test checks that no module outside ``drivers`` reads a connection's vendor
or runs SQL of its own). The operations every database does differently are abstract:
each driver implements them. The others have a portable body here (the ORM's), which a
driver replaces where its database does better (PostgreSQL's counts, its type menu), and
the partitioned layout's raise :class:`NotImplementedError` on databases without it.
Nothing is looked up at run time and no path depends on who listens to a signal.
Statements that write events hand back the rows they wrote (``INSERT … RETURNING`` on
PostgreSQL), so ``event_emitted`` receivers get exactly what was stored.

The event payloads written by drivers follow ``job_data`` below (OJS events §3):
``job.started`` (claim: ``worker_id``, ``attempt``), ``job.enqueued`` (push: ``priority``,
``scheduled_at``), ``job.scheduled`` (push of a future job: ``scheduled_at``) and
``job.completed`` (``attempt``, ``duration_ms``, ``result``). The driver suite
(``tests/drivers/``) runs the same assertions on every driver.
"""

from __future__ import annotations

import enum
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from django.core.checks import CheckMessage
from django.db import connections
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.utils import timezone

from django_ojs import envelope
from django_ojs.drivers.periods import Partition, Partitions
from django_ojs.ids import uuid7_at
from django_ojs.models import ApiKey, Event, Job, Queue

if TYPE_CHECKING:
    from django_ojs.policy import Durations


class EventMode(enum.Enum):
    """What a driver does with the events of a statement.

    The statement is the same in every mode; only whether its event rows are inserted
    and whether they come back to Python (for ``event_emitted`` receivers) differ.
    """

    #: Neither stored nor wanted (``OJS_STORE_EVENTS`` off, no signal receiver).
    NONE = "none"
    #: Built and returned, not stored (``OJS_STORE_EVENTS`` off, a receiver is connected).
    RETURN = "return"
    #: Stored in ``ojs_event`` in the same transaction; nobody needs them back.
    STORE = "store"
    #: Stored and returned (``INSERT … RETURNING``): a receiver is connected.
    STORE_RETURN = "store_return"

    @property
    def stored(self) -> bool:
        return self in (EventMode.STORE, EventMode.STORE_RETURN)

    @property
    def returned(self) -> bool:
        return self in (EventMode.RETURN, EventMode.STORE_RETURN)


class EventRow(NamedTuple):
    """One ``ojs_event`` row, in column order (without the ``seq`` key)."""

    id: Any
    type: str
    source: str
    subject: str
    time: datetime
    job_id: Any
    queue: str
    data: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return Event(**self._asdict()).to_wire()


def job_data(job: Job, **data: Any) -> dict[str, Any]:
    """The data a job event stores (events §3, conformance L0-EVT-002): the envelope's
    data but ``job_id`` and ``queue``, which are the event's columns of the same names
    (``Event.wire_data`` puts them back): about 1.3 of the 6.7 µs an event row costs
    PostgreSQL to build and store."""
    out: dict[str, Any] = {"job_type": job.type, "state": str(job.state)}
    trace_id = job.meta.get("trace_id") if isinstance(job.meta, dict) else None
    if trace_id is not None:
        out["trace_id"] = trace_id  # events §8.3: MUST propagate
    for key, value in data.items():
        if isinstance(value, datetime):
            value = envelope.format_timestamp(value)
        if value is not None:
            out[key] = value
    return out


def job_rows(
    items: Iterable[tuple[str, Job, dict[str, Any]]], source: str, when: datetime | None = None
) -> list[EventRow]:
    """Build (not store) the event rows for ``(kind, job, data)`` items."""
    when = when or timezone.now()
    return [
        EventRow(
            uuid7_at(when),
            kind,
            source,
            str(job.id),
            when,
            job.id,
            job.queue,
            job_data(job, **data),
        )
        for kind, job, data in items
    ]


def enqueue_event(job: Job) -> tuple[str, Job, dict[str, Any]]:
    """The event a push writes for ``job``: ``job.scheduled`` or ``job.enqueued``."""
    if job.state == "scheduled":
        return ("job.scheduled", job, {"scheduled_at": job.scheduled_at})
    return ("job.enqueued", job, {"priority": job.priority, "scheduled_at": job.scheduled_at})


def pushed_queues(jobs: Iterable[Job]) -> tuple[set[str], set[str]]:
    """The queues of pushed ``jobs`` (to register), and those that received available
    jobs (whose workers a push wakes on commit)."""
    queues: set[str] = set()
    available: set[str] = set()
    for job in jobs:
        queues.add(job.queue)
        if job.state == "available":
            available.add(job.queue)
    return queues, available


@dataclass(frozen=True)
class Completion:
    """One ACK: complete ``job_id`` with ``result`` if it is still active.

    ``attempt`` (when given) must match the job's current attempt (worker protocol §5.6).
    """

    job_id: uuid.UUID
    attempt: int | None
    result: Any


@dataclass
class Written:
    """Jobs a statement changed, and the event rows it wrote (or built) for them."""

    jobs: list[Job] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)


@dataclass(frozen=True)
class Look:
    """What :meth:`Driver.look` saw: jobs of the queues whose time has come (``due``:
    scheduled or retryable ones to promote first), and available jobs that a limit
    governs (``limited``: rate-limited jobs, or a queue with queue-level limits)."""

    due: bool
    limited: bool


#: What :meth:`Driver.tenant_heads` gives of each job: enough to say since when it waits.
TENANT_HEAD_FIELDS = (
    "id", "tenant", "queue", "priority", "created_at", "enqueued_at", "scheduled_at",
    "next_attempt_at",
)  # fmt: skip

_API_KEY_FIELDS = tuple(ApiKey._meta.concrete_fields)
_API_KEY_ATTNAMES = [f.attname for f in _API_KEY_FIELDS]
_API_KEY_SQL = 'SELECT {columns} FROM "{table}" WHERE prefix = %s'.format(
    columns=", ".join(f'"{f.column}"' for f in _API_KEY_FIELDS), table=ApiKey._meta.db_table
)


class Driver(ABC):
    """What every driver implements. One instance per database alias; stateless."""

    vendor: str

    def __init__(self, using: str):
        self.using = using
        #: What the health check and the manifest call this database (its vendor's name).
        self.name = self.vendor
        self._converters: list[tuple[int, Any, list[Any]]] | None = None

    # ------------------------------------------------------------------ claim

    @abstractmethod
    def claim(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None,
        events: EventMode,
        source: str,
        ids: Sequence[Any] | None = None,
        durable: bool = True,
        tenants: Sequence[str] | None = None,
    ) -> Written:
        """Atomically move up to ``limit`` available jobs of ``queue`` to ``active``.

        Without ``ids``, only jobs with no rate limit (``rate_key IS NULL``) of a queue with
        no limits (``Queue.limits``) are taken; with ``ids``, only those jobs (the ones the
        lifecycle chose under the limits).

        Order: priority high→low, then virtual time (``vtime``: the tenants' turns, 0 for
        jobs without a tenant), then FIFO (id); the returned jobs keep that order.
        ``tenants``: only jobs of these tenants (an API key's, ``X-OJS-Tenant``). Skips
        paused queues and jobs past their ``stale_at``. Sets ``attempt += 1``,
        ``started_at``, ``worker_id``, ``heartbeat_at`` and the ``visible_until``,
        ``timeout_at`` (timeout + grace) and ``stalled_at`` deadlines from
        :func:`django_ojs.policy.effective`; ``stale_at`` keeps only the expiry and total
        deadline (the enqueue TTL stops applying). Writes a ``job.started`` event per job.
        ``fields``: load only these job fields (and ``id``); ``None`` loads all. Runs in
        the caller's transaction; exactly one caller gets each job (core §6.5(2)).
        ``durable=False``: the transaction the claim runs in may commit without waiting
        for its write to reach disk (a database crash may then undo it, and the job is
        claimed again); the caller passes it only for a transaction of its own.
        """

    @abstractmethod
    def promote_due(
        self, *, now: datetime, queues: Sequence[str] | None, wait: bool, limit: int
    ) -> list[Job]:
        """Move up to ``limit`` due ``scheduled``/``retryable`` jobs to ``available``.

        Returns the moved jobs with ``previous_state`` set. With ``wait``, rows another
        transaction holds are waited for, else skipped. Writes no events and wakes no
        one: the caller does both. Runs in the caller's transaction.
        """

    @abstractmethod
    def touch_worker(self, worker_id: str, queues: list[str], now: datetime) -> None:
        """Register worker ``worker_id`` on first contact, else refresh its
        ``last_heartbeat_at`` (worker protocol §3). Runs in the caller's transaction."""

    @abstractmethod
    def record_beat(self, worker_id: str, fields: Mapping[str, Any]) -> str | None:
        """Write ``fields`` (``Worker`` field names) on worker ``worker_id``'s row and
        return the directive waiting for it (``""``: none); ``None`` when it has no row
        (the caller creates it). Runs in the caller's transaction."""

    def look(self, queues: Sequence[str], now: datetime) -> Look:
        """What a fetch from ``queues`` must do besides the plain claim, read without locks.

        The default answers "maybe" to both, and a fetch then takes its general path in
        one transaction. A driver that can tell in one cheap statement lets an idle
        worker's fetch be the claim alone.
        """
        return Look(due=True, limited=True)

    def claim_if_clear(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None,
        events: EventMode,
        source: str,
        durable: bool = True,
        register: list[str] | None = None,
        tenants: Sequence[str] | None = None,
    ) -> Written | None:
        """:meth:`claim` from ``queue``, but only when nothing of it is due or limited.

        ``None`` (and nothing claimed) when :meth:`look` says ``queue`` has due jobs to
        promote or limited jobs to weigh, or may have: the caller then takes its general
        path. Otherwise the plain claim's result, possibly empty. The default looks, then
        claims; a driver that can put the look in the claim statement makes an idle
        worker's fetch one round trip.

        ``register``: the worker's queues; the worker's row is created or refreshed
        (:meth:`touch_worker`) whatever the result, in the same statement if it can be.
        """
        if register is not None and worker_id is not None:
            self.touch_worker(worker_id, register, now)
        look = self.look([queue], now)
        if look.due or look.limited:
            return None
        return self.claim(
            queue, limit, worker_id=worker_id, now=now, visibility_ms=visibility_ms,
            defaults=defaults, fields=fields, events=events, source=source, durable=durable,
            tenants=tenants,
        )  # fmt: skip

    @abstractmethod
    def limited_candidates(self, queue: str, now: datetime, limit: int) -> list[tuple[Any, ...]]:
        """``(id, rate_key, rate_limit, tenant)`` of up to ``limit`` available, unexpired
        jobs of ``queue`` that a limit governs: rate-limited jobs, or every job when the
        queue has a queue-level limit; claim order (priority high to low, then the tenants'
        turns, then id)."""

    @abstractmethod
    def capped_candidates(
        self,
        queue: str,
        now: datetime,
        limit: int,
        *,
        window: int,
        caps: Mapping[str, int],
        tenants: Sequence[str] | None,
    ) -> list[tuple[Any, str]]:
        """``(id, tenant)`` of up to ``limit`` available, unexpired jobs of ``queue`` free
        of rate limits (and of ``tenants``' when given), in claim order, leaving out the
        jobs of the tenants of ``caps`` that have as many active jobs as their cap, among
        the first ``window`` such jobs (that bounds the rows a claim reads when those
        tenants' jobs come first). PostgreSQL locks the
        rows it returns (``FOR UPDATE SKIP LOCKED``, until the transaction ends) and reads
        no further than it needs; SQLite's transaction holds the single write lock.
        Per-tenant ``max_concurrency`` claims (``lifecycle.tenantlimits``)."""

    @abstractmethod
    def lock_rows(self, queryset: QuerySet[Job], *, limit: int, skip_locked: bool) -> list[Job]:
        """Load and lock up to ``limit`` rows of ``queryset`` (ordered by the caller).

        PostgreSQL: ``FOR UPDATE`` (``SKIP LOCKED`` when asked); SQLite: the IMMEDIATE
        transaction already holds the single write lock. Call inside a transaction.
        """

    @abstractmethod
    def update_if(self, job_id: Any, *, state: str, attempt: int, fields: dict[str, Any]) -> bool:
        """Compare-and-set: write ``fields`` only if the job is still in ``state``/``attempt``.

        Returns whether the row changed (River's ``JobSetStateIfRunning``).
        """

    # ------------------------------------------------------------------ push

    @abstractmethod
    def push_one(
        self, job: Job, *, available: bool, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        """Insert one job and its enqueue event (:func:`enqueue_event`, at ``now``),
        register its queue, wake workers on commit. Returns the event row if
        ``events.returned``.

        Atomic on its own: the caller needs no transaction (inside one, it joins it).
        ``available``: the job is available now, so listeners of its queue are woken.
        """

    @abstractmethod
    def push_many(
        self, batches: Iterable[Sequence[Job]], *, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        """Insert the jobs of ``batches`` and their enqueue events (:func:`enqueue_event`),
        register their queues and wake (on commit) the workers of the queues that
        received available jobs. Returns the event rows, in push order.

        Runs in the caller's transaction. ``batches`` may be made lazily: a driver may
        write one batch while the caller makes the next.
        """

    @abstractmethod
    def after_push(self, queues: set[str], available: set[str]) -> None:
        """Register ``queues`` (idempotent) and wake workers of the ``available`` ones.

        Runs inside the caller's transaction; wake-ups are delivered only on commit.
        """

    # ------------------------------------------------------------------ settle

    @abstractmethod
    def complete_many(
        self,
        items: Sequence[Completion],
        *,
        worker_id: str | None,
        now: datetime,
        events: EventMode,
        source: str,
        fields: Sequence[str] | None,
        without_workflow: bool = False,
        queues: Sequence[str] | None = None,
    ) -> Written:
        """ACK: complete each item whose job is still ``active`` (one statement if possible).

        With ``queues`` (names, or ``prefix*`` patterns), only jobs of those queues
        qualify: the queue allowlist of the caller's API key, checked in the same statement.

        With ``without_workflow``, only jobs outside any workflow qualify: the lifecycle
        completes workflow members in a transaction that also moves their workflow.

        A job qualifies when it is active, on the item's attempt (if given) and reserved
        by ``worker_id`` (when given; a job claimed without a worker id qualifies too).
        Sets ``completed_at``, ``result``, clears ``error`` and the deadlines, and writes
        ``job.completed``. Returns the completed jobs (``fields`` loaded, ``None`` = all)
        and their events; the others are left alone. Atomic on its own.
        """

    # ------------------------------------------------------------------ events, locks

    @abstractmethod
    def insert_events(self, rows: list[EventRow]) -> None:
        """Insert event rows in the caller's transaction."""

    def settled_event_seq(self, *, timeout: float) -> int | None:
        """The highest event ``seq`` below which no transaction can still commit an event.

        Every ``seq`` at or below it is stored or will never be (rolled back, pruned).
        SQLite has a single writer: any transaction still writing took its ``seq`` above
        every committed one, so the highest committed ``seq`` is settled. ``None`` when it
        cannot be known within ``timeout`` seconds (see the PostgreSQL driver).
        """
        last = Event.objects.using(self.using).order_by("-seq").values_list("seq", flat=True)
        return last.first() or 0

    @abstractmethod
    def lock_keys(self, keys: Sequence[str]) -> None:
        """Wait for exclusive locks on ``keys`` (unique-job keys) until the transaction ends.

        Concurrent pushes of the same key run one after the other, so each sees the jobs
        the previous one committed. PostgreSQL: transaction-scoped advisory locks taken in
        sorted order (no deadlock between batches); SQLite: the IMMEDIATE transaction
        already holds the single write lock. Call inside a transaction.
        """

    def refresh_statistics(self, *, min_rows: int, min_pages: int) -> list[str]:
        """Analyse the job tables whose planner statistics are badly out of date.

        A table is analysed when it holds at least twice the rows it held at its last
        analysis, and at least ``min_rows``: a table filled in seconds, which autovacuum
        reaches only a minute or more later. Updates (claims, completions) do not count.
        The count of rows lags behind the inserts by up to seconds, so a table that
        had fewer than ``min_pages`` pages at its last analysis is also analysed once its
        file has ``min_pages`` and twice those. Returns the tables analysed. PostgreSQL
        only (its plans follow the statistics); elsewhere nothing is done.
        """
        return []

    @abstractmethod
    def try_lock(self, name: str) -> bool:
        """Try to take a lock named ``name`` until the current transaction ends.

        Used for leader election among reapers; True when this caller holds it.
        """

    @abstractmethod
    def wait_finished(self, job_id: Any, timeout: float) -> str | None:
        """Block until job ``job_id`` is terminal or ``timeout`` seconds pass.

        Returns its state then (``None`` if there is no such job), or the non-terminal
        state it still has at the timeout. PostgreSQL: woken by a NOTIFY from the job's
        terminal transition; SQLite: polls with a growing interval (at most 0.5 s).
        """

    @abstractmethod
    def listener(self, queues: list[str]) -> Listener:
        """A new object that waits for work in ``queues`` (one per worker loop)."""

    # ------------------------------------------------------------------ optional indexes

    def search_indexes(self, *, create: bool | None = None) -> dict[str, bool] | None:
        """The optional indexes that serve ``args``/``meta`` containment: name → exists.

        ``create=True`` creates the missing ones, ``False`` drops them, ``None`` only
        reports. ``None`` is returned when the database has no such index (SQLite).
        """
        return None

    # ------------------------------------------------------------------ reads of the admin and API

    @abstractmethod
    def json_contains(self, jobs: QuerySet[Job], column: str, fragment: Any) -> QuerySet[Job]:
        """The jobs of ``jobs`` whose JSON ``column`` (``args``, ``meta``) contains
        ``fragment`` as PostgreSQL's ``jsonb @>`` defines it: objects by subset, arrays by
        any element, scalars by equal value and type (admin API §7.1 search)."""

    def distinct_types(self, jobs: QuerySet[Job], limit: int) -> list[str]:
        """Up to ``limit`` of the job types present, in order, for a filter menu."""
        return list(jobs.order_by("type").values_list("type", flat=True).distinct()[:limit])

    @abstractmethod
    def fair_bases(
        self, keys: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[float, float]]:
        """For each (queue, tenant, priority): where the tenant's next turn starts (the
        larger of the head and its tail, ``lifecycle.fairness``) and 1 / its weight."""

    @abstractmethod
    def distinct_tenants(self, after: str, limit: int) -> list[str]:
        """Up to ``limit`` of the tenants jobs name, in order, after ``after``."""

    def tenant_counts(
        self, tenants: Sequence[str], exact_limit: int
    ) -> dict[tuple[str, str], tuple[int, bool]]:
        """Each tenant's jobs by state, ``{(tenant, state): (n, estimated)}`` (a pair with no
        job may be left out). Here one exact grouped count; a driver may stop counting a
        pair past ``exact_limit`` jobs and estimate it instead."""
        rows = (
            Job.objects.using(self.using)
            .filter(tenant__in=list(tenants))
            .exclude(tenant="")
            .values_list("tenant", "state")
            .annotate(n=Count("*"))
            .order_by()
        )
        return {(tenant, state): (n, False) for tenant, state, n in rows}

    def tenant_heads(self, tenants: Sequence[str]) -> list[dict[str, Any]]:
        """Each tenant's next job in each queue (the first of its ``available`` jobs in
        claim order, ``ojs_job_tenant_claim_idx``): dicts of ``TENANT_HEAD_FIELDS``. The
        queues are the ``Queue`` rows (a push registers its queue)."""
        jobs = Job.objects.using(self.using)
        ids: list[Any] = []
        for tenant in tenants:
            if not tenant:
                continue
            head = (
                jobs.filter(queue=OuterRef("name"), tenant=tenant, state="available")
                .order_by("-priority", "vtime", "id")
                .values("id")[:1]
            )
            found = Queue.objects.using(self.using).annotate(head=Subquery(head))
            ids.extend(found.filter(head__isnull=False).values_list("head", flat=True))
        return list(jobs.filter(id__in=ids).values(*TENANT_HEAD_FIELDS)) if ids else []

    def count(self, rows: QuerySet[Any], exact_limit: int) -> tuple[int, bool]:
        """``(n, estimated)``: how many rows ``rows`` has. Here always exact; a driver may
        estimate above ``exact_limit`` rows rather than count a million of them."""
        return rows.count(), False

    def group_counts(
        self, rows: QuerySet[Any], keys: Sequence[str], exact_limit: int
    ) -> tuple[list[tuple[Any, ...]], bool]:
        """``([(*key values, n), ...], estimated)``: ``rows`` counted per ``keys``. Here
        always exact; a driver may estimate from a sample of about ``exact_limit`` rows
        rather than read a million of them (the metrics' per-tenant gauges)."""
        counted = rows.order_by().values_list(*keys).annotate(n=Count("pk")).order_by()
        return [tuple(r) for r in counted], False

    def api_key(self, prefix: str) -> ApiKey | None:
        """The API key row with ``prefix``, loaded as the ORM loads it, without compiling a
        query: one fixed statement, then each field's converters, as the ORM applies them.

        Run for every request whose key is not in ``apikeys``' cache: a queryset is
        compiled anew on each call, and ``raw()`` resolves its columns and converters per
        call; either cost more than the statement (``raw()`` was 15 % of an enqueue
        request's CPU in gunicorn).
        """
        db = connections[self.using]
        with db.cursor() as cursor:
            cursor.execute(_API_KEY_SQL, [prefix])
            row = cursor.fetchone()
        if row is None:
            return None
        values = list(row)
        for i, col, converters in self._api_key_converters(db):
            for convert in converters:
                values[i] = convert(values[i], col, db)
        return ApiKey.from_db(self.using, _API_KEY_ATTNAMES, values)

    def _api_key_converters(self, db: Any) -> list[tuple[int, Any, list[Any]]]:
        """Each column that has converters for ``db``: its index, expression and converters
        (the backend's, then the field's), as ``SQLCompiler.get_converters`` finds them."""
        found = self._converters
        if found is None:
            found = []
            for i, field in enumerate(_API_KEY_FIELDS):
                col = field.get_col(ApiKey._meta.db_table)
                converters = db.ops.get_db_converters(col) + field.get_db_converters(db)
                if converters:
                    found.append((i, col, converters))
            self._converters = found
        return found

    def replica_lag(self) -> tuple[bool, float | None]:
        """Whether this database is a replica (a standby replaying another server's
        changes), and how many seconds behind it is (0 when it replayed all it received;
        None when unknown). SQLite: never a replica."""
        return False, None

    def check_configuration(self) -> list[CheckMessage]:
        """Django system check messages about this database's settings (none here)."""
        return []

    # ------------------------------------------------------------------ optional partitions

    def partitions(self, table: str) -> Partitions | None:
        """``table``'s time partitions (``ojs_job`` or ``ojs_event``); None when it has none.

        Only PostgreSQL has the partitioned layout (``manage.py ojs_partition``).
        """
        return None

    def partition_table(
        self, table: str, *, interval: str, start: datetime, end: datetime
    ) -> Partitions:
        """Make ``table`` partitioned by ``interval``, with periods from ``start`` to ``end``.

        Runs in the caller's transaction and copies every row (the table is locked
        meanwhile). Raises :class:`NotImplementedError` where there is no such layout.
        """
        raise NotImplementedError(f"{self.vendor} has no partitioned layout")

    def unpartition_table(self, table: str) -> None:
        """Make the partitioned ``table`` a plain one again (rows copied, table locked)."""
        raise NotImplementedError(f"{self.vendor} has no partitioned layout")

    def add_partition(
        self, table: str, start: datetime, end: datetime, *, timeout: float
    ) -> Partition | None:
        """Add the period ``[start, end)`` to the partitioned ``table``.

        None when the table's lock was not had within ``timeout`` seconds.
        """
        raise NotImplementedError(f"{self.vendor} has no partitioned layout")

    def drop_partition(
        self,
        partition: Partition,
        *,
        unless: QuerySet[Any] | None,
        keep: QuerySet[Any] | None,
        timeout: float,
    ) -> bool:
        """Drop ``partition`` with its rows, unless ``unless`` finds a row; the rows
        ``keep`` finds move to the default partition first.

        Both are evaluated once the table is locked for the drop, so they are still true
        when the partition goes: keep them to quick queries. False when ``unless`` found
        a row or the lock was not had within ``timeout`` seconds (nothing changed then).
        """
        raise NotImplementedError(f"{self.vendor} has no partitioned layout")


class Listener(Protocol):
    def wait(self, timeout: float) -> bool:
        """Block until work may be available or ``timeout`` seconds pass.

        Returns True when woken by a notification, False on timeout or :meth:`wake`.
        """
        ...

    def wake(self) -> None:
        """Make a pending :meth:`wait` return now (from another thread)."""
        ...

    def close(self) -> None:
        """Release the listening connection, if any."""
        ...
