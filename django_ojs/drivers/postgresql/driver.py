"""PostgreSQL driver: one-statement ``SKIP LOCKED`` claim, ACK and push, ``LISTEN/NOTIFY``.

Statements that write events return the rows they wrote, so signal receivers see exactly
what was stored. The rest is the portable ORM implementation.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache, partial
from itertools import compress, repeat
from operator import is_not
from typing import Any

import psycopg
from django.core.checks import CheckMessage, Warning
from django.db import OperationalError, connections, transaction
from django.db.models import Count, QuerySet

from django_ojs.drivers import partitions as parts
from django_ojs.drivers.base import (
    TENANT_HEAD_FIELDS,
    Completion,
    EventMode,
    EventRow,
    Look,
    Written,
    enqueue_event,
    job_rows,
    pushed_queues,
)
from django_ojs.drivers.orm import OrmDriver
from django_ojs.drivers.periods import Partition, Partitions
from django_ojs.drivers.postgresql.cursors import kept_cursor, pipelined, server_cursor
from django_ojs.drivers.postgresql.listener import (
    PostgreSQLListener,
    connection_params,
    listen_alias,
    pooled_signs,
)
from django_ojs.drivers.postgresql.notifier import notifier, pushes
from django_ojs.drivers.postgresql.shapes import (
    JOB_COLUMN_INDEXES,
    Shape,
    batch_params,
    claim_limit,
    claim_shape,
    complete_shape,
    event_row,
    event_values,
    is_uniform,
    job_casts,
    job_values,
    json_text,
    outcomes_sql,
    push_batch_sql,
    push_one_sql,
)
from django_ojs.drivers.postgresql.statements import (
    AFTER_EMPTY_CLAIM_SQL,
    CAPPED_CANDIDATES_SQL,
    CAPPED_TENANT_CANDIDATES_SQL,
    COPY_EVENTS_SQL,
    COPY_THRESHOLD,
    DISTINCT_TENANTS_SQL,
    DISTINCT_TYPES_SQL,
    DUE_PROBE_SQL,
    FAIR_BASES_SQL,
    INDEX_VALID_SQL,
    INDEXES_PRESENT_SQL,
    INSERT_EVENT_SQL,
    INSERT_EVENTS_SQL,
    LIMITED_CANDIDATES_SQL,
    LOCK_KEYS_SQL,
    LOCK_NOT_AVAILABLE,
    LOOK_SQL,
    NOTIFY_IN_TRANSACTION_SQL,
    PUSH_ONE_PARAMS,
    RECORD_BEAT_SQL,
    REGISTER_QUEUES_SQL,
    REPLICA_LAG_SQL,
    SEARCH_INDEXES,
    SETTLED_EVENT_SEQ_SQL,
    STALE_JOB_TABLES_SQL,
    TENANT_COUNTS_SQL,
    TENANT_HEADS_SQL,
    TOUCH_WORKER_SQL,
    TRY_LOCK_SQL,
    WORKER_FIELDS,
    WORKER_PARAMS,
)
from django_ojs.models import Job, Worker, loaded_jobs
from django_ojs.policy import Durations
from django_ojs.states import TERMINAL_STATES, JobState
from django_ojs.validation import split_patterns

logger = logging.getLogger("django_ojs.worker")

_TENANT_HEADS_SQL = TENANT_HEADS_SQL.format(
    outer=", ".join(f"h.{f}" for f in TENANT_HEAD_FIELDS),
    inner=", ".join(f"j.{f}" for f in TENANT_HEAD_FIELDS),
)


class PostgreSQLDriver(OrmDriver):
    vendor = "postgresql"

    # ------------------------------------------------------------ reads of the admin and API

    def json_contains(self, jobs: QuerySet[Job], column: str, fragment: Any) -> QuerySet[Job]:
        return jobs.filter(**{f"{column}__contains": fragment})  # jsonb @>

    def distinct_types(self, jobs: QuerySet[Job], limit: int) -> list[str]:
        with connections[self.using].cursor() as cursor:
            cursor.execute(DISTINCT_TYPES_SQL, [limit])
            return [row[0] for row in cursor.fetchall()]

    def fair_bases(
        self, keys: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[float, float]]:
        queues, tenants, priorities = (list(column) for column in zip(*keys, strict=True))
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(
                FAIR_BASES_SQL, {"queues": queues, "tenants": tenants, "priorities": priorities}
            )
            rows = cursor.fetchall()
        return {
            (queue, tenant, priority): (max(head or 0.0, tail or 0.0), 1.0 / (weight or 1.0))
            for queue, tenant, priority, head, tail, weight in rows
        }

    def distinct_tenants(self, after: str, limit: int) -> list[str]:
        with connections[self.using].cursor() as cursor:
            cursor.execute(DISTINCT_TENANTS_SQL, {"after": after, "limit": limit})
            return [row[0] for row in cursor.fetchall()]

    def tenant_counts(
        self, tenants: Sequence[str], exact_limit: int
    ) -> dict[tuple[str, str], tuple[int, bool]]:
        # One statement: each (tenant, state) counted up to exact_limit + 1 entries of
        # ojs_job_tenant_idx; a pair past it is the planner's estimate, as in count().
        states = [s.value for s in JobState]
        params = {"tenants": list(tenants), "states": states, "cap": exact_limit + 1}
        rows = self._without_jit(TENANT_COUNTS_SQL, params)
        out: dict[tuple[str, str], tuple[int, bool]] = {}
        jobs = Job.objects.using(self.using)
        for tenant, state, n in rows:
            if n > exact_limit:
                estimate = self._planner_estimate(jobs.filter(tenant=tenant, state=state))
                out[tenant, state] = (max(estimate, n), True)
            elif n:
                out[tenant, state] = (n, False)
        return out

    def tenant_heads(self, tenants: Sequence[str]) -> list[dict[str, Any]]:
        rows = self._without_jit(_TENANT_HEADS_SQL, {"tenants": [t for t in tenants if t]})
        return [dict(zip(TENANT_HEAD_FIELDS, row, strict=True)) for row in rows]

    def _without_jit(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The rows of a page's statement of many small index probes, JIT off: the
        planner's cost of a thousand probes passes ``jit_above_cost``, and compiling
        then took longer (15-80 ms) than running them (3 ms). The setting is the
        transaction's, and put back after (the caller's transaction may go on)."""
        with transaction.atomic(using=self.using), connections[self.using].cursor() as cursor:
            cursor.execute("SELECT current_setting('jit'), set_config('jit', 'off', true)")
            (was, _) = cursor.fetchone()
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
            cursor.execute("SELECT set_config('jit', %s, true)", [was])
            return rows

    def count(self, rows: QuerySet[Any], exact_limit: int) -> tuple[int, bool]:
        # ``SELECT count(*) FROM (… LIMIT n)`` stops early; above it, the planner's
        # estimate of the same query (EXPLAIN: no rows read).
        exact = rows.order_by()[: exact_limit + 1].count()
        if exact <= exact_limit:
            return exact, False
        return max(self._planner_estimate(rows), exact), True

    def group_counts(
        self, rows: QuerySet[Any], keys: Sequence[str], exact_limit: int
    ) -> tuple[list[tuple[Any, ...]], bool]:
        # Up to exact_limit rows (a count that stops early: through a partial index, an
        # index-only scan of at most that many entries), counted exactly. Above, the
        # same grouping over a TABLESAMPLE SYSTEM of about exact_limit rows' worth of
        # the table's pages, scaled up: the work stays bounded at any size.
        found = rows.order_by()[: exact_limit + 1].count()
        if found <= exact_limit:
            return super().group_counts(rows, keys, exact_limit)
        table = rows.model._meta.db_table
        # The planner's estimate of the whole table (a partitioned one's too: the sum of
        # its partitions', where the parent's own reltuples stays -1).
        total = float(self._planner_estimate(rows.model._default_manager.using(self.using).all()))
        percent = min(100.0, max(0.01, 100.0 * exact_limit / total)) if total > 0 else 100.0
        counted = rows.order_by().values_list(*keys).annotate(n=Count("pk")).order_by()
        sql, params = counted.query.sql_with_params()
        quoted = f'FROM "{table}"'
        if quoted not in sql:  # pragma: no cover - a query Django wrote otherwise
            return super().group_counts(rows, keys, exact_limit)
        at = sql.index(quoted)
        before = sql[:at].count("%s")
        sql = f"{sql[:at]}{quoted} TABLESAMPLE SYSTEM (%s){sql[at + len(quoted) :]}"
        params = (*params[:before], percent, *params[before:])
        scale = 100.0 / percent
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, params)
            sampled = cursor.fetchall()
        return [(*r[:-1], round(r[-1] * scale)) for r in sampled], True

    def _planner_estimate(self, rows: QuerySet[Any]) -> int:
        sql, params = rows.order_by().query.sql_with_params()
        with connections[self.using].cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])

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
        return self._claim(
            queue, limit, worker_id=worker_id, now=now, visibility_ms=visibility_ms,
            defaults=defaults, fields=fields, events=events, source=source, ids=ids,
            durable=durable, tenants=tenants,
        )  # fmt: skip

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
        # One statement: the claim, on the condition that nothing is due or limited (and
        # the worker's sign of life, when asked). Only an empty result needs a second
        # look, to tell an empty queue from a held one.
        def claim() -> Written:
            return self._claim(
                queue, limit, worker_id=worker_id, now=now, visibility_ms=visibility_ms,
                defaults=defaults, fields=fields, events=events, source=source, clear=True,
                durable=durable, touch=register, tenants=tenants,
            )  # fmt: skip

        written = claim()
        if written.jobs:
            return written
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(AFTER_EMPTY_CLAIM_SQL, {"now": now, "queues": [queue], "queue": queue})
            due, limited, available = cursor.fetchone()
        if due or limited:
            return None
        if available:
            # Clear now, with work available: the claim saw a job due that a promotion
            # (the reaper's) has made available since, and was held back by it. Once
            # more: an HTTP fetch would otherwise answer "no jobs" with one waiting.
            written = claim()
        return written

    def _claim(
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
        clear: bool = False,
        durable: bool = True,
        touch: list[str] | None = None,
        tenants: Sequence[str] | None = None,
    ) -> Written:
        params: dict[str, Any] = {
            "tenants": list(tenants) if tenants is not None else None,
            "tenant": tenants[0] if tenants else None,
            "ids": list(ids) if ids is not None else None,
            "queues": [queue],
            "queue": queue,
            "limit": limit,
            "now": now,
            "worker_id": worker_id,
            "visibility_ms": visibility_ms,
            "default_visibility_ms": defaults.visibility_ms,
            "default_timeout_ms": defaults.timeout_ms,
            "default_grace_ms": defaults.grace_ms,
            "default_heartbeat_ms": defaults.heartbeat_timeout_ms,
            "source": source,
        }
        worker_row = None  # the worker's row, when the claim registers it
        if touch is not None and worker_id is not None:
            worker_row = self._worker_params(worker_id, touch, now)
            params.update(worker_row)
        shape = claim_shape(
            None if fields is None else tuple(fields), events, by_ids=ids is not None,
            clear=clear, durable=durable, of_worker=worker_id is not None,
            touch=worker_row is not None, limit=claim_limit(limit), scoped=_scope(tenants),
        )  # fmt: skip
        written = self._load(shape, params, events)
        # RETURNING has no order: restore the claim order.
        written.jobs.sort(key=lambda j: (-j.priority, j.vtime, j.id))
        return written

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
        params = {
            "without_workflow": without_workflow,
            "outcomes": outcomes_sql(items),
            "worker_id": worker_id,
            "now": now,
            "source": source,
        }
        one = len(items) == 1
        if one:
            params["id"] = items[0].job_id
        else:
            params["ids"] = [item.job_id for item in items]
        if queues is not None:
            params["queue_names"], params["queue_prefixes"] = split_patterns(queues)
        shape = complete_shape(
            None if fields is None else tuple(fields), events, one, queues is not None
        )
        return self._load(shape, params, events)

    def _load(self, shape: Shape, params: dict[str, Any], events: EventMode) -> Written:
        # Model.from_db wants the values in the model's field order; the event columns
        # (when asked) follow the job columns in each row.
        # Binary rows: a claim's 20 columns of timestamps, UUIDs and JSON are read by
        # psycopg's C loaders, and jsonb arrives decoded with json.loads, which is all
        # JSONField.from_db_value does for the job's fields (none has a decoder).
        with server_cursor(connections[self.using], binary=True) as cursor:
            cursor.execute(shape.sql, params)
            rows = cursor.fetchall()
        n = len(shape.fields)
        written = Written(loaded_jobs(self.using, shape.attnames, [row[:n] for row in rows]))
        if events.returned:
            written.events = [event_row(row[n:]) for row in rows if row[n] is not None]
        return written

    def promote_due(
        self, *, now: datetime, queues: Sequence[str] | None, wait: bool, limit: int
    ) -> list[Job]:
        # A lock-free probe first: nearly always nothing is due. A row another
        # transaction is promoting still reads as due here (its old version), so the
        # locking pass below runs and waits for it when asked.
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(
                DUE_PROBE_SQL, {"now": now, "all": queues is None, "queues": list(queues or [])}
            )
            if cursor.fetchone() is None:
                return []
        return super().promote_due(now=now, queues=queues, wait=wait, limit=limit)

    def search_indexes(self, *, create: bool | None = None) -> dict[str, bool] | None:
        # CONCURRENTLY: building them never blocks pushes or claims (it cannot run inside
        # a transaction block, so this is called in autocommit). A build that failed
        # leaves an INVALID index; it is dropped and built again.
        connection = connections[self.using]
        with server_cursor(connection) as cursor:
            for name, column in SEARCH_INDEXES.items():
                cursor.execute(INDEX_VALID_SQL, {"name": name})
                found = cursor.fetchone()
                if create is False or (create and found is not None and not found[0]):
                    cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
                if create:
                    cursor.execute(
                        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} "
                        f"ON ojs_job USING gin ({column} jsonb_path_ops)"
                    )
            cursor.execute(INDEXES_PRESENT_SQL, {"names": list(SEARCH_INDEXES)})
            present = {name for (name,) in cursor.fetchall()}
        return {name: name in present for name in SEARCH_INDEXES}

    def partitions(self, table: str) -> Partitions | None:
        with server_cursor(connections[self.using]) as cursor:
            return parts.layout(cursor, table)

    def partition_table(
        self, table: str, *, interval: str, start: datetime, end: datetime
    ) -> Partitions:
        with server_cursor(connections[self.using]) as cursor:
            parts.convert(cursor, table, interval, start, end)
            found = parts.layout(cursor, table)
        assert found is not None
        return found

    def unpartition_table(self, table: str) -> None:
        with server_cursor(connections[self.using]) as cursor:
            parts.revert(cursor, table)

    def add_partition(
        self, table: str, start: datetime, end: datetime, *, timeout: float
    ) -> Partition | None:
        try:
            with (
                transaction.atomic(using=self.using),
                server_cursor(connections[self.using]) as cursor,
            ):
                return parts.create(cursor, table, start, end, timeout=timeout)
        except OperationalError as exc:
            _unless_lock_busy(exc, table)
            return None

    def drop_partition(
        self,
        partition: Partition,
        *,
        unless: QuerySet[Any] | None,
        keep: QuerySet[Any] | None,
        timeout: float,
    ) -> bool:
        try:
            with (
                transaction.atomic(using=self.using),
                server_cursor(connections[self.using]) as cursor,
            ):
                if not parts.lock(cursor, partition, timeout=timeout):
                    return False
                if unless is not None and unless.exists():
                    return False
                kept = [] if keep is None else list(keep.values_list("pk", flat=True))
                parts.drop(cursor, partition, keep=kept)
        except OperationalError as exc:
            _unless_lock_busy(exc, partition.table)
            return False
        return True

    def settled_event_seq(self, *, timeout: float) -> int | None:
        try:
            with (
                transaction.atomic(using=self.using),
                server_cursor(connections[self.using]) as cursor,
            ):
                cursor.execute(
                    "SELECT set_config('lock_timeout', %s, true)",
                    [f"{max(1, int(timeout * 1000))}ms"],
                )
                lock, read = SETTLED_EVENT_SEQ_SQL
                cursor.execute(lock)
                cursor.execute(read)
                return int(cursor.fetchone()[0])
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            return None

    def touch_worker(self, worker_id: str, queues: list[str], now: datetime) -> None:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(TOUCH_WORKER_SQL, self._worker_params(worker_id, queues, now))

    def record_beat(self, worker_id: str, fields: Mapping[str, Any]) -> str | None:
        connection = connections[self.using]
        params: dict[str, Any] = {"worker_id": worker_id}
        columns = []
        for name, value in fields.items():
            f, column = _WORKER_FIELD[name]
            params[column] = f.get_db_prep_save(value, connection)
            columns.append(column)
        sql = _record_beat_sql(tuple(columns))
        with server_cursor(connection) as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else (row[0] or "")

    def _worker_params(self, worker_id: str, queues: list[str], now: datetime) -> dict[str, Any]:
        """The parameters of ``TOUCH_WORKER_SQL`` (or its CTE) for a new worker row."""
        connection = connections[self.using]
        worker = Worker(id=worker_id, queues=queues, started_at=now, last_heartbeat_at=now)
        return {
            name: f.get_db_prep_save(getattr(worker, f.attname), connection)
            for name, f in zip(WORKER_PARAMS, WORKER_FIELDS, strict=True)
        }

    def look(self, queues: Sequence[str], now: datetime) -> Look:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(LOOK_SQL, {"now": now, "queues": list(queues)})
            due, limited = cursor.fetchone()
        return Look(due=bool(due), limited=bool(limited))

    def limited_candidates(self, queue: str, now: datetime, limit: int) -> list[tuple[Any, ...]]:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(LIMITED_CANDIDATES_SQL, {"queue": queue, "now": now, "limit": limit})
            rows = cursor.fetchall()
        return [
            (id_, key, json.loads(wire) if isinstance(wire, str | bytes) else wire, tenant)
            for id_, key, wire, tenant in rows
        ]

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
        params = {
            "queue": queue,
            "now": now,
            "limit": limit,
            "window": window,
            "capped": list(caps),
            "caps": list(caps.values()),
            "tenants": None if tenants is None else list(tenants),
        }
        sql = CAPPED_CANDIDATES_SQL if tenants is None else CAPPED_TENANT_CANDIDATES_SQL
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(sql, params)
            return [(id_, tenant) for id_, tenant in cursor.fetchall()]

    def push_one(
        self, job: Job, *, available: bool, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        values = job_values(job)
        present = tuple(compress(JOB_COLUMN_INDEXES, map(is_not, values, repeat(None))))
        names, given = map(PUSH_ONE_PARAMS.__getitem__, present), map(values.__getitem__, present)
        params: dict[str, Any] = dict(zip(names, given, strict=True))
        # The event is built in Python and sent as parameters. Built by PostgreSQL from
        # the inserted row (as a bulk push's are) it took 30 µs less of the client's CPU
        # and 45 µs more of the server's: initialising the event expression costs more
        # per statement than building one row of it.
        rows = [] if events is EventMode.NONE else job_rows([enqueue_event(job)], source, now)
        if events.stored:
            event = rows[0]
            params.update(
                event_id=event.id,
                event_type=event.type,
                source=source,
                now=event.time,
                event_data=json_text(event.data),  # JSON text: psycopg's C code sends it
            )
        connection = connections[self.using]
        if available and not connection.in_atomic_block and connection.get_autocommit():
            # Its own transaction: it NOTIFYs on commit, unless another push of this
            # process is under way, whose commit it would queue behind (notifier.py).
            with pushes.alone() as alone:
                sql = push_one_sql(present, events.stored, notify=alone)
                kept_cursor(connection).execute(sql, params)
            if not alone:
                notifier(self.using).wake((job.queue,))
        else:
            kept_cursor(connection).execute(push_one_sql(present, events.stored), params)
            if available:
                self.wake_on_commit((job.queue,))
        return rows if events.returned else []

    def push_many(
        self, batches: Iterable[Sequence[Job]], *, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        connection = connections[self.using]
        casts = job_casts(connection)
        queues: set[str] = set()
        available: set[str] = set()
        sent: list[tuple[Any, Sequence[Job]]] = []
        cursor = None
        # Each batch is sent as soon as it is made, in pipeline mode: PostgreSQL writes
        # it while the caller makes the next. The results (and errors, as Django's) are
        # read at the end. The queues' registration goes last; the wake-up after the commit.
        with pipelined(connection):
            for jobs in batches:
                if not jobs:
                    continue
                shape, params = batch_params(jobs)
                params.update(now=now, source=source)
                if cursor is None or events.returned:  # a batch's events: its cursor's rows
                    cursor = server_cursor(connection)
                sql = push_batch_sql(shape, casts, events, is_uniform(shape, params))
                cursor.execute(sql, params)
                sent.append((cursor, jobs))
                batch_queues, batch_available = pushed_queues(jobs)
                queues |= batch_queues
                available |= batch_available
            if queues:
                with server_cursor(connection) as registering:
                    registering.execute(REGISTER_QUEUES_SQL, {"queues": sorted(queues)})
        if available:  # after the pipeline: its statements have run (and, alone, committed)
            self.wake_on_commit(available)
        rows: list[EventRow] = []
        if events.returned:
            for cursor, jobs in sent:
                order = {job.id: i for i, job in enumerate(jobs)}
                made = (event_row(r) for r in cursor.fetchall())
                rows.extend(sorted(made, key=lambda r: order[r.job_id]))
        return rows

    def insert_events(self, rows: list[EventRow]) -> None:
        if not rows:
            return
        with server_cursor(connections[self.using]) as cursor:
            if len(rows) >= COPY_THRESHOLD:
                with cursor.copy(COPY_EVENTS_SQL) as copy:
                    for row in rows:
                        copy.write_row(event_values(row))
            elif len(rows) == 1:
                cursor.execute(INSERT_EVENT_SQL, event_values(rows[0]))
            else:
                columns = [list(column) for column in zip(*rows, strict=True)]
                columns[-1] = [json_text(data) for data in columns[-1]]
                cursor.execute(INSERT_EVENTS_SQL, columns)

    def after_push(self, queues: set[str], available: set[str]) -> None:
        if queues:
            with server_cursor(connections[self.using]) as cursor:
                cursor.execute(REGISTER_QUEUES_SQL, {"queues": sorted(queues)})
        if available:
            self.wake_on_commit(available)

    def wake_on_commit(self, queues: Iterable[str]) -> None:
        """Have the listeners of ``queues`` woken once the caller's transaction commits
        (now, outside one), by this process's notifier: never inside the transaction,
        where a ``NOTIFY`` makes every pushing commit wait for the one before it."""
        connection = connections[self.using]
        if connection.in_atomic_block or connection.get_autocommit():
            wake = partial(notifier(self.using).wake, tuple(queues))
            transaction.on_commit(wake, using=self.using)
        else:  # a transaction managed by hand: Django cannot tell when it commits
            with server_cursor(connection) as cursor:
                cursor.execute(NOTIFY_IN_TRANSACTION_SQL, [sorted(queues)])

    def lock_keys(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(LOCK_KEYS_SQL, [sorted(set(keys))])

    def refresh_statistics(self, *, min_rows: int, min_pages: int) -> list[str]:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(STALE_JOB_TABLES_SQL, {"min_rows": min_rows, "min_pages": min_pages})
            stale = [name for (name,) in cursor.fetchall()]
            for name in stale:  # names from the catalog, matched by the pattern above
                cursor.execute(f'ANALYZE "{name}"')
        return stale

    def try_lock(self, name: str) -> bool:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(TRY_LOCK_SQL, [name])
            return bool(cursor.fetchone()[0])

    def replica_lag(self) -> tuple[bool, float | None]:
        with server_cursor(connections[self.using]) as cursor:
            cursor.execute(REPLICA_LAG_SQL)
            in_recovery, lag = cursor.fetchone()
        return bool(in_recovery), (None if lag is None else max(0.0, float(lag)))

    def check_configuration(self) -> list[CheckMessage]:
        alias = listen_alias(self.using)
        signs = pooled_signs(connections[alias].settings_dict)
        if not signs:
            return []
        return [
            Warning(
                f"LISTEN uses database alias {alias!r}, which looks pooled "
                f"({', '.join(signs)}): workers and django_ojs.wait() will poll instead of "
                "being notified.",
                hint="A pooler in transaction mode cannot pass LISTEN. Add an alias that "
                "connects straight to PostgreSQL and name it in OJS_LISTEN_DATABASE.",
                id="ojs.W005",
            )
        ]

    def listener(self, queues: list[str]) -> PostgreSQLListener:
        return PostgreSQLListener(self.using, queues)

    def wait_finished(self, job_id: Any, timeout: float) -> str | None:
        # Own autocommit connection: LISTEN first, then mark the job awaited (the trigger
        # of migration 0002_postgresql NOTIFYs a terminal transition of an awaited job), then read
        # its state. A transition committed before the mark is seen by the read; one
        # after it is notified: none is missed. Notifications of other jobs are skipped.
        # Through OJS_LISTEN_DATABASE when set. Through a pooler (no notifications come)
        # the state is read again every half second instead of every five.
        alias = listen_alias(self.using)
        params = connection_params(alias)
        every = 0.5 if pooled_signs(connections[alias].settings_dict) else 5.0
        deadline = time.monotonic() + timeout
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute("LISTEN ojs_finished")
            conn.execute(
                "UPDATE ojs_job SET awaited = true WHERE id = %s AND NOT awaited "
                "AND state NOT IN ('completed', 'discarded', 'cancelled')",
                [job_id],
            )
            while True:
                row = conn.execute("SELECT state FROM ojs_job WHERE id = %s", [job_id]).fetchone()
                state = row[0] if row else None
                left = deadline - time.monotonic()
                if state is None or state in TERMINAL_STATES or left <= 0:
                    return state
                for _ in conn.notifies(timeout=min(left, every), stop_after=1):
                    break  # any notification: read the state again (cheap, one row)


#: The worker's fields by name (a beat names them; the statement wants their columns).
_WORKER_FIELD = {f.name: (f, str(f.column)) for f in WORKER_FIELDS}


@lru_cache(maxsize=64)
def _record_beat_sql(columns: tuple[str, ...]) -> str:
    """``RECORD_BEAT_SQL`` for a beat that carries ``columns`` (a few shapes per program)."""
    return RECORD_BEAT_SQL.format(assignments=", ".join(f'"{c}" = %({c})s' for c in columns))


def _scope(tenants: Sequence[str] | None) -> int:
    """A claim's tenants, for its shape: 0 any job, 1 one tenant's, 2 several's (or none)."""
    if tenants is None:
        return 0
    return 1 if len(tenants) == 1 else 2


def _unless_lock_busy(exc: OperationalError, table: str) -> None:
    """Re-raise ``exc`` unless it is a lock not had within ``lock_timeout``."""
    if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
        raise exc
    logger.info("partitions of %s unchanged: the table's lock was busy", table)
