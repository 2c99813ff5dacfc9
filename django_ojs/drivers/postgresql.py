"""PostgreSQL driver: one-statement ``SKIP LOCKED`` claim and ``LISTEN/NOTIFY`` wake-ups.

The only module with raw SQL. Each statement is a named constant with the reason the ORM
is not enough.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from psycopg.types.json import Jsonb

from django_ojs.models import Job
from django_ojs.policy import Durations

CHANNEL = "ojs_job_available"

# Why raw SQL: the claim must be ONE round trip that locks, updates and returns the rows
# (as Oban, River and procrastinate do). The ORM cannot express UPDATE … FROM (SELECT …
# FOR UPDATE SKIP LOCKED) … RETURNING. The CTE is an optimisation fence: PostgreSQL plans
# the inner SELECT on its own, walking ojs_job_claim_idx (queue, priority DESC, id) over
# available rows only, and SKIP LOCKED makes concurrent claimers pass over each other's
# rows instead of queueing behind them (OJS core §6.5(2): exactly one worker claims a job).
# Paused queues are excluded in the same statement, and jobs past their stale_at (expiry,
# enqueue TTL, total timeout) are left for the reaper to discard.
CLAIM_SQL = """
WITH next AS (
    SELECT id FROM ojs_job
    WHERE state = 'available' AND queue = %(queue)s
      AND (stale_at IS NULL OR stale_at > %(now)s)
      AND NOT EXISTS (SELECT 1 FROM ojs_queue q WHERE q.name = %(queue)s AND q.paused)
    ORDER BY priority DESC, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
UPDATE ojs_job AS j SET
    state = 'active',
    attempt = j.attempt + 1,
    started_at = %(now)s,
    worker_id = %(worker_id)s,
    heartbeat_at = %(now)s,
    visible_until = %(now)s + make_interval(
        secs => COALESCE(%(visibility_ms)s, j.visibility_timeout_ms, %(default_visibility_ms)s)
                / 1000.0),
    timeout_at = %(now)s + make_interval(
        secs => (COALESCE(j.timeout_ms, %(default_timeout_ms)s)
                 + COALESCE(j.grace_period_ms, %(default_grace_ms)s)) / 1000.0),
    stalled_at = %(now)s + make_interval(
        secs => COALESCE(j.heartbeat_timeout_ms, %(default_heartbeat_ms)s) / 1000.0),
    stale_at = LEAST(j.expires_at, j.deadline_at)
FROM next
WHERE j.id = next.id
RETURNING j.*
){events}
SELECT {columns} FROM claimed
"""

# A UUIDv7 made by PostgreSQL 13+ (no uuidv7() before 18): the millisecond clock over
# the first 48 bits of a random v4 UUID, and the version nibble 4 turned into 7.
UUID7_SQL = (
    "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing "
    "substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) "
    "FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
)

# Events §8.3: a job's meta.trace_id travels in every event's data (as events.job_data
# does in Python); shared by the SQL that writes events in bulk.
_TRACE_ID_SQL = """CASE WHEN jsonb_typeof(meta -> 'trace_id') IS NOT NULL
                     AND jsonb_typeof(meta -> 'trace_id') <> 'null'
                THEN jsonb_build_object('trace_id', meta -> 'trace_id') ELSE '{}' END"""

# Why raw SQL: the job.started events of a claim, built in the claim statement from the
# rows it claimed (the same data as ``events.job_data``: job_id, job_type, queue, state,
# trace_id, worker_id, attempt), instead of one Python object and one COPY row per job.
CLAIM_EVENTS_CTE = f""", started AS (
    INSERT INTO ojs_event (id, type, source, subject, time, job_id, queue, data)
    SELECT {UUID7_SQL}, 'job.started', %(source)s, id::text, %(now)s, id, queue,
        jsonb_build_object('job_id', id::text, 'job_type', type, 'queue', queue,
                           'state', 'active', 'attempt', attempt)
        || {_TRACE_ID_SQL}
        || CASE WHEN %(worker_id)s::text IS NOT NULL
                THEN jsonb_build_object('worker_id', %(worker_id)s::text) ELSE '{{}}' END
    FROM claimed
)"""

# Why raw SQL: registering the queues and waking listeners is one round trip instead of
# two per push. pg_notify inside the pushing transaction is delivered only when (and if)
# it commits, so a rolled-back job never wakes a worker.
AFTER_PUSH_SQL = (
    """
WITH registered AS (
    INSERT INTO ojs_queue (name, paused, created_at)
    SELECT name, false, now() FROM unnest(%(queues)s::text[]) AS name
    ON CONFLICT (name) DO NOTHING
)
SELECT pg_notify('"""
    + CHANNEL
    + """', name) FROM unnest(%(available)s::text[]) AS name
"""
)

JOB_COLUMNS = tuple(f.column for f in Job._meta.concrete_fields)
_JSON_JOB_COLUMNS = frozenset(
    i for i, f in enumerate(Job._meta.concrete_fields) if f.get_internal_type() == "JSONField"
)
EVENT_COLUMNS = ("id", "type", "source", "subject", "time", "job_id", "queue", "data")
_JOB_COLUMN_LIST = ", ".join(f'"{c}"' for c in JOB_COLUMNS)  # "unique" is a reserved word
_JOB_PLACEHOLDERS = ", ".join(["%s"] * len(JOB_COLUMNS))
_EVENT_PLACEHOLDERS = "(" + ", ".join(["%s"] * len(EVENT_COLUMNS)) + ")"

# Why raw SQL: a single push must be as cheap as one insert. The ORM needs four round
# trips (BEGIN, INSERT job, INSERT event, COMMIT) plus one for the queue/NOTIFY; these
# data-modifying CTEs do all of it in ONE statement, which PostgreSQL runs atomically, so
# outside a caller's transaction no BEGIN/COMMIT is needed at all. Inside one, the NOTIFY
# is still delivered only on commit.
PUSH_ONE_SQL = f"""
WITH job AS (
    INSERT INTO ojs_job ({_JOB_COLUMN_LIST}) VALUES ({_JOB_PLACEHOLDERS})
), queue AS (
    INSERT INTO ojs_queue (name, paused, created_at) VALUES (%s, false, now())
    ON CONFLICT (name) DO NOTHING
){{events}}
SELECT pg_notify('{CHANNEL}', %s) WHERE %s
"""
PUSH_ONE_EVENT_CTE = f""", event AS (
    INSERT INTO ojs_event ({", ".join(EVENT_COLUMNS)}) VALUES {_EVENT_PLACEHOLDERS}
)"""

# Why raw SQL: bulk pushes and bulk events go through COPY, which is an order of
# magnitude faster than a multi-row INSERT prepared by the ORM (per-field preparation
# dominates bulk_create's cost).
COPY_JOBS_SQL = f"COPY ojs_job ({_JOB_COLUMN_LIST}) FROM STDIN"
COPY_EVENTS_SQL = f"COPY ojs_event ({', '.join(EVENT_COLUMNS)}) FROM STDIN"
# A few event rows: one multi-row INSERT (COPY costs an extra round trip).
INSERT_EVENTS_SQL = f"INSERT INTO ojs_event ({', '.join(EVENT_COLUMNS)}) VALUES {{rows}}"
COPY_THRESHOLD = 50

# Why raw SQL: an in-process worker completes hundreds of jobs a second, and the ORM needs
# a SELECT … FOR UPDATE, an UPDATE and an event INSERT (plus building a model per row) for
# each batch. These data-modifying CTEs do it in ONE statement: the UPDATE keeps only the
# rows still active, reserved by this worker and on the reported attempt (worker protocol
# §5.6), and the events are built from exactly the rows it changed (the same data as
# ``events.job_data`` + ``settle.ack``: job_id, job_type, queue, state, trace_id, attempt,
# duration_ms, result). NULL results stay SQL NULL, as ``ack(result=None)`` stores them.
# The job.completed events of the rows a completion statement changed (``done``).
_COMPLETED_EVENTS_CTE = f"""events AS (
    INSERT INTO ojs_event (id, type, source, subject, time, job_id, queue, data)
    SELECT {UUID7_SQL}, 'job.completed', %(source)s, id::text, %(now)s, id, queue,
        jsonb_build_object('job_id', id::text, 'job_type', type, 'queue', queue,
                           'state', 'completed', 'attempt', attempt)
        || {_TRACE_ID_SQL}
        || CASE WHEN started_at IS NOT NULL
                THEN jsonb_build_object('duration_ms',
                     round(extract(epoch FROM %(now)s - started_at) * 1000)::bigint)
                ELSE '{{}}' END
        || CASE WHEN result IS NOT NULL THEN jsonb_build_object('result', result)
                ELSE '{{}}' END
    FROM done WHERE %(store_events)s
)"""
ACK_MANY_SQL = f"""
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(results)s::jsonb[])
        AS t(id, attempt, result)
), done AS (
    UPDATE ojs_job AS j SET
        state = 'completed', completed_at = %(now)s, result = input.result, error = NULL,
        visible_until = NULL, timeout_at = NULL, stalled_at = NULL
    FROM input
    WHERE j.id = input.id AND j.state = 'active' AND j.worker_id = %(worker_id)s
      AND j.attempt = input.attempt
    RETURNING j.id, j.type, j.queue, j.attempt, j.started_at, j.meta, input.result
), {_COMPLETED_EVENTS_CTE}
SELECT id FROM done
"""

# Why raw SQL: the same one-statement completion for a single ACK (Python API, HTTP).
# Its happy path is one round trip instead of six (BEGIN, SELECT … FOR UPDATE, UPDATE,
# event INSERT, COMMIT); when no row matches, the caller falls back to the locked path,
# which says precisely why (not found, not active, another worker's reservation).
ACK_ONE_SQL = f"""
WITH done AS (
    UPDATE ojs_job AS j SET
        state = 'completed', completed_at = %(now)s, result = %(result)s, error = NULL,
        visible_until = NULL, timeout_at = NULL, stalled_at = NULL
    WHERE j.id = %(id)s AND j.state = 'active'
      AND (%(worker_id)s::text IS NULL OR j.worker_id IS NULL OR j.worker_id = %(worker_id)s)
    RETURNING j.*
), {_COMPLETED_EVENTS_CTE}
SELECT * FROM done
"""

# Why raw SQL: the job.enqueued / job.scheduled events of a bulk push, built in SQL from
# the rows just copied (the same data as ``events.job_data`` + ``push._enqueue_event``:
# job_id, job_type, queue, state, trace_id, priority, scheduled_at), instead of one
# Python row and one COPY row per job.
ENQUEUE_EVENTS_SQL = f"""
INSERT INTO ojs_event (id, type, source, subject, time, job_id, queue, data)
SELECT {UUID7_SQL},
    CASE WHEN state = 'scheduled' THEN 'job.scheduled' ELSE 'job.enqueued' END,
    %(source)s, id::text, %(now)s, id, queue,
    jsonb_build_object('job_id', id::text, 'job_type', type, 'queue', queue, 'state', state)
    || {_TRACE_ID_SQL}
    || CASE WHEN state = 'scheduled' THEN '{{}}'::jsonb
            ELSE jsonb_build_object('priority', priority) END
    || CASE WHEN scheduled_at IS NULL THEN '{{}}'::jsonb
            ELSE jsonb_build_object('scheduled_at', to_char(scheduled_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) END
FROM ojs_job AS j WHERE j.id = ANY(%(ids)s::uuid[])
ORDER BY j.id
"""

# Why raw SQL: advisory locks have no ORM equivalent. The transaction-scoped variant is
# released at COMMIT/ROLLBACK, so a reaper that dies can never keep the leadership.
TRY_LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext(%s))"

# Why raw SQL: LISTEN has no ORM equivalent.
LISTEN_SQL = "LISTEN " + CHANNEL


class PostgreSQLDriver:
    vendor = "postgresql"

    def __init__(self, using: str):
        self.using = using

    def claim(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None = None,
        event_source: str | None = None,
    ) -> list[Job]:
        params = {
            "queue": queue,
            "limit": limit,
            "now": now,
            "worker_id": worker_id,
            "visibility_ms": visibility_ms,
            "default_visibility_ms": defaults.visibility_ms,
            "default_timeout_ms": defaults.timeout_ms,
            "default_grace_ms": defaults.grace_ms,
            "default_heartbeat_ms": defaults.heartbeat_timeout_ms,
        }
        events = ""
        if event_source is not None:
            params["source"] = event_source
            events = CLAIM_EVENTS_CTE
        if fields is None:
            sql = CLAIM_SQL.format(columns="*", events=events)
            jobs = list(Job.objects.db_manager(self.using).raw(sql, params))
        else:
            jobs = self._claim_fields(params, fields, events)
        # RETURNING has no order: restore the claim order.
        jobs.sort(key=lambda j: (-j.priority, j.id))
        return jobs

    #: ``claim(event_source=...)`` writes the job.started events itself.
    claim_writes_events = True

    def _claim_fields(
        self, params: dict[str, Any], fields: Sequence[str], events: str
    ) -> list[Job]:
        # Only the asked-for columns: building a full 45-field model per claimed row is most
        # of a worker's fetch cost. The other fields are deferred (loaded on access).
        # Model.from_db wants the values in the model's field order.
        wanted = {"id", *fields}
        model_fields = [f for f in Job._meta.concrete_fields if f.name in wanted]
        columns = ", ".join(f'"{f.column}"' for f in model_fields)
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_SQL.format(columns=columns, events=events), params)
            rows = cursor.fetchall()
        attnames = [f.attname for f in model_fields]
        json_fields = [
            (i, f) for i, f in enumerate(model_fields) if f.get_internal_type() == "JSONField"
        ]
        jobs = []
        for row in rows:
            values = list(row)
            for i, field in json_fields:
                values[i] = field.from_db_value(values[i], None, connection)
            jobs.append(Job.from_db(self.using, attnames, values))
        return jobs

    single_statement_push = True

    def push(self, jobs: list[Job], events: list[tuple[Any, ...]], available: set[str]) -> None:
        if len(jobs) == 1 and len(events) <= 1:
            job = jobs[0]
            sql = PUSH_ONE_SQL.format(events=PUSH_ONE_EVENT_CTE if events else "")
            params = [*_job_values(job), job.queue]
            if events:
                params.extend(_event_values(events[0]))
            params.extend([job.queue, job.queue in available])
            with connections[self.using].cursor() as cursor:
                cursor.execute(sql, params)
            return
        with connections[self.using].cursor() as cursor, cursor.copy(COPY_JOBS_SQL) as copy:
            for job in jobs:
                copy.write_row(_job_values(job))
        self.insert_events(events)
        self.after_push({job.queue for job in jobs}, available)

    def push_many(
        self, jobs: list[Job], available: set[str], *, now: datetime, source: str
    ) -> None:
        """Bulk push whose enqueue events are written in SQL (no Python event rows)."""
        self.push(jobs, [], available)
        with connections[self.using].cursor() as cursor:
            cursor.execute(
                ENQUEUE_EVENTS_SQL, {"ids": [job.id for job in jobs], "now": now, "source": source}
            )

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with connections[self.using].cursor() as cursor:
            if len(rows) >= COPY_THRESHOLD:
                with cursor.copy(COPY_EVENTS_SQL) as copy:
                    for row in rows:
                        copy.write_row(_event_values(row))
            else:
                sql = INSERT_EVENTS_SQL.format(rows=", ".join([_EVENT_PLACEHOLDERS] * len(rows)))
                cursor.execute(sql, [v for row in rows for v in _event_values(row)])

    def ack_many(
        self,
        items: list[tuple[Any, int, Any]],
        *,
        worker_id: str,
        now: datetime,
        source: str,
        store_events: bool,
    ) -> list[Any]:
        """Complete ``(job_id, attempt, result)`` items held by ``worker_id`` (one statement)."""
        params = {
            "ids": [item[0] for item in items],
            "attempts": [item[1] for item in items],
            "results": [None if item[2] is None else json.dumps(item[2]) for item in items],
            "worker_id": worker_id,
            "now": now,
            "source": source,
            "store_events": store_events,
        }
        with connections[self.using].cursor() as cursor:
            cursor.execute(ACK_MANY_SQL, params)
            return [row[0] for row in cursor.fetchall()]

    def ack_one(
        self,
        job_id: Any,
        result: Any,
        *,
        worker_id: str | None,
        now: datetime,
        source: str,
        store_events: bool,
    ) -> Job | None:
        """Complete one active job in one statement; ``None`` if no row qualified."""
        params = {
            "id": job_id,
            "result": None if result is None else Jsonb(result),
            "worker_id": worker_id,
            "now": now,
            "source": source,
            "store_events": store_events,
        }
        rows = list(Job.objects.db_manager(self.using).raw(ACK_ONE_SQL, params))
        return rows[0] if rows else None

    def after_push(self, queues: set[str], available: set[str]) -> None:
        with connections[self.using].cursor() as cursor:
            cursor.execute(
                AFTER_PUSH_SQL, {"queues": sorted(queues), "available": sorted(available)}
            )

    def try_lock(self, name: str) -> bool:
        with connections[self.using].cursor() as cursor:
            cursor.execute(TRY_LOCK_SQL, [name])
            return bool(cursor.fetchone()[0])

    def listener(self, queues: list[str]) -> PostgreSQLListener:
        return PostgreSQLListener(self.using, queues)


def _dumps(value: Any) -> str:
    # Most jobs carry empty meta/tags/extra/errors: skip the encoder for those.
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value)


_JOB_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


def _job_values(job: Job) -> list[Any]:
    fields = job.__dict__  # plain attribute values: faster than getattr on the bulk path
    values = [fields[name] for name in _JOB_ATTNAMES]
    for i in _JSON_JOB_COLUMNS:
        if values[i] is not None:
            values[i] = Jsonb(values[i], dumps=_dumps)
    return values


def _event_values(row: tuple[Any, ...]) -> list[Any]:
    values = list(row)
    values[-1] = Jsonb(values[-1], dumps=_dumps)
    return values


class PostgreSQLListener:
    """A dedicated autocommit connection that ``LISTEN``s for pushes to some queues."""

    def __init__(self, using: str, queues: list[str]):
        import psycopg

        params = connections[using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self._params = params
        self._conn = psycopg.connect(**params, autocommit=True)
        self._conn.execute(LISTEN_SQL)
        self._queues = set(queues)
        self._lock = threading.Lock()
        self._closed = False

    def wait(self, timeout: float) -> bool:
        if self._closed:
            return False
        try:
            for note in self._conn.notifies(timeout=timeout, stop_after=1):
                # An empty payload is wake(): return without claiming to have work.
                return bool(note.payload) and (not self._queues or note.payload in self._queues)
        except Exception:
            if self._closed:
                return False
            raise
        return False

    def wake(self) -> None:
        # NOTIFY on our own channel from a short-lived connection interrupts wait().
        with self._lock:
            if self._closed:
                return
            import psycopg

            with psycopg.connect(**self._params, autocommit=True) as conn:
                conn.execute("SELECT pg_notify(%s, '')", [CHANNEL])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
