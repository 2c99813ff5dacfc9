"""PostgreSQL driver: one-statement ``SKIP LOCKED`` claim, ACK and push, ``LISTEN/NOTIFY``.

The only module with raw SQL. Each statement is a named constant with the reason the ORM
is not enough. Statements that write events return the rows they wrote, so signal
receivers see exactly what was stored. The rest is the portable ORM implementation.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Any, NamedTuple

import psycopg
from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet
from psycopg.adapt import Loader
from psycopg.types.json import Jsonb

from django_ojs import resilience
from django_ojs.drivers import partitions as parts
from django_ojs.drivers.base import (
    Completion,
    EventMode,
    EventRow,
    Look,
    Partition,
    Partitions,
    Written,
    enqueue_event,
    job_rows,
    pushed_queues,
)
from django_ojs.drivers.orm import OrmDriver
from django_ojs.models import Job, Worker, loaded_jobs
from django_ojs.policy import Durations
from django_ojs.states import TERMINAL_STATES
from django_ojs.validation import split_patterns

logger = logging.getLogger("django_ojs.worker")
#: SQLSTATE of a lock not had within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"

CHANNEL = "ojs_job_available"

JOB_FIELDS = tuple(Job._meta.concrete_fields)
JOB_COLUMNS = tuple(f.column for f in JOB_FIELDS)
_JSON_JOB_COLUMNS = frozenset(
    i for i, f in enumerate(JOB_FIELDS) if f.get_internal_type() == "JSONField"
)
EVENT_COLUMNS = ("id", "type", "source", "subject", "time", "job_id", "queue", "data")
_EVENT_COLUMN_LIST = ", ".join(EVENT_COLUMNS)
_EVENT_PLACEHOLDERS = "(" + ", ".join(["%s"] * len(EVENT_COLUMNS)) + ")"

# A UUIDv7 made by PostgreSQL 13+ (no uuidv7() before 18), per row of a statement that
# builds events: the millisecond of the events' time (``%(now)s``, 48 bits: an id says
# where its event is in ojs_event_time_idx, see Event.objects.with_id, so no unique
# index on the ids is kept), the version nibble 7, then 12 random bits, the RFC 9562
# variant and 62 random bits. The random bits are the session's random() (xoshiro,
# seeded from the system's strong random), XORed with 62 strong-random bits drawn once
# per statement: the previous expression, a strong-random UUID per row, cost 3.7-4.2 µs
# per row on the project's PostgreSQL, this one 0.8 µs per row and about 4 µs once per
# statement (the time and the strong bits are uncorrelated subqueries, which PostgreSQL
# evaluates once): less from 2 rows on, and the events of claims, ACKs and bulk pushes
# come by the hundred. If the caller's session has called setseed(), random() repeats
# from that seed, but never within one statement, and the strong bits still differ from
# statement to statement. The millisecond is taken from the time truncated to it, in
# whole numbers (PostgreSQL 13's extract() is a double: 0.123 s * 1000 may be 122.99…).
_UUID7_HIGH_SQL = (
    "(SELECT (round(extract(epoch FROM date_trunc('milliseconds', %(now)s::timestamptz))"
    " * 1000)::bigint << 16) | 28672)"
)
_UUID7_LOW_SQL = (
    "(SELECT x'8000000000000000'::bigint"
    " | (('x' || encode(substring(uuid_send(gen_random_uuid()) FROM 9), 'hex'))::bit(64)::bigint"
    " & 4611686018427387903))"
)
UUID7_SQL = (
    f"encode(int8send({_UUID7_HIGH_SQL} | floor(random() * 4096)::bigint)"
    f" || int8send({_UUID7_LOW_SQL} # floor(random() * 4611686018427387904)::bigint),"
    " 'hex')::uuid"
)

# Events §8.3: a job's meta.trace_id travels in every event's data (as base.job_data does
# in Python); shared by every statement that builds job events from rows.
_HAS_TRACE_ID_SQL = """jsonb_typeof(meta -> 'trace_id') IS NOT NULL
                     AND jsonb_typeof(meta -> 'trace_id') <> 'null'"""


def _event_select(
    kind: str, pairs: str, source: str, *, variants: Sequence[tuple[str, str]] = ()
) -> str:
    """``SELECT`` of event rows (``EVENT_COLUMNS``) for the job rows of ``source``.

    An event's data is one ``jsonb_build_object`` of the job's keys, ``pairs`` (more
    keys and values, in SQL) and the trace id when the job's meta has one. ``variants``
    are keys only some rows have: ``(condition, pairs)`` in order, the last one's
    condition unused (it is the ``ELSE``). Each variant is a whole object of its own,
    not an object merged with ``||``: a merge copies the data, and one object instead
    of four cut the data's cost per row by a third (2.3 against 3.6 µs on the project's
    PostgreSQL), one instead of two by half again (2.0 against 4.6 µs).
    """
    keys = "'job_type', type, 'state', state"  # job_id and queue are columns (job_data)
    if pairs:
        keys = f"{keys}, {pairs}"

    def objects(keys: str) -> str:
        if not variants:
            return f"jsonb_build_object({keys})"
        whens = [
            f"WHEN {condition} THEN jsonb_build_object({_join(keys, more)})"
            for condition, more in variants[:-1]
        ]
        last = f"ELSE jsonb_build_object({_join(keys, variants[-1][1])})"
        return "CASE " + "\n                 ".join([*whens, last]) + " END"

    data = f"""CASE WHEN {_HAS_TRACE_ID_SQL}
                THEN {objects(f"{keys}, 'trace_id', meta -> 'trace_id'")}
                ELSE {objects(keys)} END"""
    return f"""SELECT {UUID7_SQL} AS id, {kind} AS type, %(source)s::text AS source,
        id::text AS subject, %(now)s::timestamptz AS time, id AS job_id, queue,
        {data} AS data
    FROM {source}"""


def _join(*pairs: str) -> str:
    return ", ".join(p for p in pairs if p)


def _events_cte(name: str, select: str, mode: EventMode) -> str:
    """A CTE ``name`` whose rows are the events ``select`` builds.

    Stored modes insert them into ``ojs_event`` (``RETURNING`` them when they are to be
    returned); RETURN only builds them (``OJS_STORE_EVENTS`` off and a receiver wants
    them); NONE adds no CTE.
    """
    if mode is EventMode.NONE:
        return ""
    if mode.stored:
        returning = f" RETURNING {_EVENT_COLUMN_LIST}" if mode.returned else ""
        select = f"INSERT INTO ojs_event ({_EVENT_COLUMN_LIST}) {select}{returning}"
    return f", {name} AS ({select})"


# Why raw SQL: the claim must be ONE round trip that locks, updates and returns the rows
# (as Oban, River and procrastinate do). The ORM cannot express UPDATE … FROM (SELECT …
# FOR UPDATE SKIP LOCKED) … RETURNING. The CTE is an optimisation fence: PostgreSQL plans
# the inner SELECT on its own, walking ojs_job_claim_idx (queue, priority DESC, id) over
# available rows only, and SKIP LOCKED makes concurrent claimers pass over each other's
# rows instead of queueing behind them (OJS core §6.5(2): exactly one worker claims a job).
# Paused queues are excluded in the same statement, and jobs past their stale_at (expiry,
# enqueue TTL, total timeout) are left for the reaper to discard. The deadlines follow
# policy.effective: the job's value, else the configured default (all in ms).
# The claimed rows are updated through ``id = ANY(ARRAY(SELECT id FROM next))``, which
# only the primary key serves, not a join to ``next``: for the join, PostgreSQL's plans
# read the whole table into a hash (with 50,000 jobs waiting, a claim of 500 took 31 ms
# instead of 20 ms, and a prepared claim of one job 12 ms instead of 1 ms).
CLAIM_SQL = """
WITH {touch}next AS (
    SELECT id FROM ojs_job
    WHERE state = 'available' AND queue = %(queue)s AND {which}
      AND (stale_at IS NULL OR stale_at > %(now)s)
      AND NOT EXISTS (SELECT 1 FROM ojs_queue q WHERE q.name = %(queue)s AND {gate})
    ORDER BY priority DESC, id
    LIMIT {limit}
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
WHERE j.id = ANY(ARRAY(SELECT id FROM next))
RETURNING {returning}
){events}
SELECT {columns} FROM claimed AS c{join}
"""
# What the job.started events read from the claimed rows.
_CLAIM_EVENT_COLUMNS = ("id", "type", "queue", "state", "attempt", "meta")
# The job.started events of a claim, built from the rows it claimed: with the claiming
# worker's id when there is one (the statement is built for either case).
CLAIM_EVENTS = _event_select("'job.started'", "'attempt', attempt", "claimed")
CLAIM_EVENTS_OF_WORKER = _event_select(
    "'job.started'", "'attempt', attempt, 'worker_id', %(worker_id)s::text", "claimed"
)

# Why raw SQL: an ACK (one from HTTP, or a worker's batch) is ONE statement instead of
# BEGIN, SELECT … FOR UPDATE, UPDATE, event INSERT, COMMIT. The UPDATE keeps only rows
# still active, on the reported attempt (when given) and reserved by the worker (when
# given; worker protocol §5.6); the job.completed events are built from exactly the rows
# it changed. NULL results stay SQL NULL, as ``ack(result=None)`` stores them.
# The jobs are read by primary key (``id = ANY(ids)``), and no other way is open to the
# planner: each job's attempt and result come from one JSON object keyed by job id
# (``outcomes``), not from a joined input, and the state test is written
# ``IS NOT DISTINCT FROM 'active'`` (``= 'active'``, the constant is not NULL), which no
# index serves. Where the table had no column statistics yet (new, or truncated, until
# autovacuum analyses it), the planner's guesses made a batch ACK read every job claimed
# since the last vacuum through ojs_job_active_idx, or rescan the joined input once per
# job (250,000 rows for a batch of 500): a 30,000-job drain ran 2.4 to 8 times slower.
# One job (every HTTP ACK) is named by ``id = %(id)s`` (COMPLETE_ONE), not by an array:
# PostgreSQL plans a prepared ``= ANY(array)`` anew on every call, since its generic plan
# must assume an array of ten, which costs more than the custom plan for one, and so never
# wins. Planning this statement took 40 % of an HTTP ACK's time in PostgreSQL (about
# 0.2 of 0.48 ms); with a scalar id the one generic plan is made once per connection.
COMPLETE_MANY = "j.id = ANY(%(ids)b::uuid[])"
COMPLETE_ONE = "j.id = %(id)s"
# A caller whose API key may use some queues only completes jobs of those (the key's
# names and ``prefix*`` patterns): in the statement, not by a read of the job's queue
# before it (one round trip less for every ACK of such a worker).
COMPLETE_QUEUE_GATE = """
      AND (j.queue = ANY(%(queue_names)s::text[])
           OR EXISTS (SELECT 1 FROM unnest(%(queue_prefixes)s::text[]) AS qp(prefix)
                      WHERE starts_with(j.queue, qp.prefix)))"""
COMPLETE_SQL = """
WITH done AS (
    UPDATE ojs_job AS j SET
        state = 'completed', completed_at = %(now)s, result = p.outcomes -> j.id::text -> 'r',
        error = NULL, visible_until = NULL, timeout_at = NULL, stalled_at = NULL
    FROM (SELECT %(outcomes)s::jsonb AS outcomes) AS p
    WHERE {which} AND j.state IS NOT DISTINCT FROM 'active'{queue_gate}
      AND (p.outcomes -> j.id::text -> 'a' IS NULL
           OR j.attempt = (p.outcomes -> j.id::text -> 'a')::int)
      AND (%(worker_id)s::text IS NULL OR j.worker_id IS NULL OR j.worker_id = %(worker_id)s)
      AND (NOT %(without_workflow)s OR j.workflow_id IS NULL)
    RETURNING {returning}
){events}
SELECT {columns} FROM done AS c{join}
"""
# What the job.completed events read from the completed rows.
_COMPLETE_EVENT_COLUMNS = (
    "id",
    "type",
    "queue",
    "state",
    "attempt",
    "started_at",
    "meta",
    "result",
)
_DURATION_SQL = "round(extract(epoch FROM %(now)s::timestamptz - started_at) * 1000)::bigint"
COMPLETE_EVENTS = _event_select(
    "'job.completed'",
    "'attempt', attempt",
    "done",
    variants=[
        ("started_at IS NULL AND result IS NULL", ""),
        ("started_at IS NULL", "'result', result"),
        ("result IS NULL", f"'duration_ms', {_DURATION_SQL}"),
        ("", f"'duration_ms', {_DURATION_SQL}, 'result', result"),
    ],
)

# Why raw SQL: registering the queues and waking listeners is one round trip instead of
# two per push. pg_notify inside the pushing transaction is delivered only when (and if)
# it commits, so a rolled-back job never wakes a worker.
AFTER_PUSH_SQL = f"""
WITH registered AS (
    INSERT INTO ojs_queue (name, paused, created_at)
    SELECT name, false, now() FROM unnest(%(queues)s::text[]) AS name
    ON CONFLICT (name) DO NOTHING
)
SELECT pg_notify('{CHANNEL}', name) FROM unnest(%(available)s::text[]) AS name
"""

# Why raw SQL: a single push must be as cheap as one insert. The ORM needs four round
# trips (BEGIN, INSERT job, INSERT event, COMMIT) plus one for the queue/NOTIFY; these
# data-modifying CTEs do all of it in ONE statement, which PostgreSQL runs atomically, so
# outside a caller's transaction no BEGIN/COMMIT is needed at all. Inside one, the NOTIFY
# is still delivered only on commit.
# Only the job's non-NULL columns are listed (a NULL column is what the INSERT leaves
# out), and the queue name is one parameter used three times: the statement stays
# under psycopg's 50 parameters, so its conversion to $n placeholders is cached, and
# psycopg prepares it on the server (see _cursor); a few shapes cover a program's pushes.
PUSH_ONE_SQL = f"""
WITH job AS (
    INSERT INTO ojs_job ({{columns}}) VALUES ({{values}})
), queue AS (
    INSERT INTO ojs_queue (name, paused, created_at) VALUES (%(queue)s, false, now())
    ON CONFLICT (name) DO NOTHING
){{events}}
SELECT pg_notify('{CHANNEL}', %(queue)s) WHERE %(available)s
"""
_QUEUE_INDEX = JOB_COLUMNS.index("queue")
#: The parameter of each job column in PUSH_ONE_SQL (the queue's is used thrice).
_PUSH_ONE_PARAMS = tuple(
    "queue" if i == _QUEUE_INDEX else f"job{i}" for i in range(len(JOB_COLUMNS))
)
# The event's subject, job id and queue are the job's own parameters.
_JOB_ID_PARAM = _PUSH_ONE_PARAMS[JOB_COLUMNS.index("id")]
PUSH_ONE_EVENT_CTE = f""", event AS (
    INSERT INTO ojs_event ({_EVENT_COLUMN_LIST})
    VALUES (%(event_id)s, %(event_type)s, %(source)s, %({_JOB_ID_PARAM})s::text, %(now)s,
            %({_JOB_ID_PARAM})s, %(queue)s, %(event_data)s)
)"""

# Why raw SQL: bulk events go through COPY, which is an order of magnitude faster than
# a multi-row INSERT prepared by the ORM (per-field preparation dominates bulk_create's
# cost).
COPY_EVENTS_SQL = f"COPY ojs_event ({_EVENT_COLUMN_LIST}) FROM STDIN"
# A few event rows: one multi-row INSERT (COPY costs an extra round trip).
INSERT_EVENTS_SQL = f"INSERT INTO ojs_event ({_EVENT_COLUMN_LIST}) VALUES {{rows}}"
COPY_THRESHOLD = 50

_SCHEDULED_AT_SQL = """to_char(scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""

#: The job.enqueued / job.scheduled event of each row of ``pushed`` (base.enqueue_event
#: in Python).
ENQUEUE_EVENTS = _event_select(
    "CASE WHEN state = 'scheduled' THEN 'job.scheduled' ELSE 'job.enqueued' END",
    "",
    "pushed",
    variants=[
        ("state = 'scheduled' AND scheduled_at IS NULL", ""),
        ("state = 'scheduled'", f"'scheduled_at', {_SCHEDULED_AT_SQL}"),
        ("scheduled_at IS NULL", "'priority', priority"),
        ("", f"'priority', priority, 'scheduled_at', {_SCHEDULED_AT_SQL}"),
    ],
)

# Why raw SQL: a bulk push sends each batch of jobs as ONE statement that inserts the
# rows and builds their events from what it inserted (``RETURNING``: no read back), in
# pipeline mode, the batches one after the other (see lifecycle.push.PUSH_BATCH) and the
# queues' registration last: one round trip in all. Before, the events statement and a
# COPY of the rows were two (COPY cannot be pipelined), and the rows were formatted for
# COPY in Python: 1,000 jobs took 35-39 → 30-32 ms end to end in alternating runs. A
# column's values come as one array when they differ between the batch's jobs, as one
# value when the batch shares it (its type, queue and timestamps, as a rule: psycopg
# dumps an array element by element), and not at all when every job leaves it NULL
# (the table's own NULL). The arrays are taken apart side by side (``ROWS FROM``); a
# JSON column's values are one JSON array (``jsonb_array_elements``), encoded at once.
_NULL, _SHARED, _VARYING, _JSON_ARRAY = 0, 1, 2, 3
_ID_INDEX = JOB_COLUMNS.index("id")
_PUSHED_RETURNING = "id, type, queue, state, priority, scheduled_at, meta"
_COLUMN = {str(column): i for i, column in enumerate(JOB_COLUMNS)}

#: The events of a uniform batch (see :func:`_uniform`): its jobs differ only in their
#: ids (and arguments), and an event's data has no job id (it is a column, see
#: ``job_data``), so their events' data are one object, built once per statement (an
#: uncorrelated subquery).
UNIFORM_ENQUEUE_EVENTS = """SELECT {uuid7} AS id, 'job.enqueued' AS type, %(source)s::text AS source,
        id::text AS subject, %(now)s::timestamptz AS time, id AS job_id, queue,
        (SELECT jsonb_build_object('job_type', %(c{type})s::text, 'state', %(c{state})s::text,
                                   'priority', %(c{priority})s::integer)) AS data
    FROM pushed""".format(uuid7=UUID7_SQL, **_COLUMN)


def _uniform(shape: tuple[int, ...], params: dict[str, Any]) -> bool:
    """True when a batch's jobs share their type, queue, state (not scheduled) and
    priority, none is scheduled and none has meta, so none has a trace id to carry
    (:data:`UNIFORM_ENQUEUE_EVENTS`): a bulk push's jobs, as a rule."""
    shared = all(shape[_COLUMN[c]] == _SHARED for c in ("type", "queue", "state", "priority"))
    return (
        shared
        and shape[_COLUMN["scheduled_at"]] == _NULL
        and params[f"c{_COLUMN['state']}"] != "scheduled"
        and shape[_COLUMN["meta"]] == _SHARED
        and params[f"c{_COLUMN['meta']}"] == "{}"
    )


_casts: tuple[str, ...] | None = None


def _job_casts(connection: Any) -> tuple[str, ...]:
    """Each job column's type in SQL, as the parameters of a pushed batch are cast."""
    global _casts
    if _casts is None:
        _casts = tuple(str(f.db_type(connection)) for f in JOB_FIELDS)
    return _casts


@functools.lru_cache(maxsize=128)
def _push_batch_sql(
    shape: tuple[int, ...], casts: tuple[str, ...], events: EventMode, uniform: bool = False
) -> str:
    """The statement of a pushed batch whose columns have ``shape`` (see
    :func:`_batch_params`): its jobs, and their events stored (nobody wants them
    back), returned (``event_emitted`` receivers), only built, or none. ``uniform``:
    the batch is (:func:`_uniform`)."""
    columns, select, arrays, names = [], [], [], []
    for i, kind in enumerate(shape):
        if kind == _NULL:
            continue
        columns.append(f'"{JOB_COLUMNS[i]}"')
        if kind == _SHARED:
            select.append(f"%(c{i})s::{casts[i]}")
            continue
        if kind == _JSON_ARRAY:
            arrays.append(f"jsonb_array_elements(%(c{i})s::jsonb)")
        else:
            arrays.append(f"unnest(%(c{i})b::{casts[i]}[])")  # binary: psycopg dumps it in C
        names.append(f"c{i}")
        select.append(f"j.c{i}")
    insert = (
        f"INSERT INTO ojs_job ({', '.join(columns)}) SELECT {', '.join(select)}"
        f" FROM ROWS FROM ({', '.join(arrays)}) AS j({', '.join(names)})"
    )
    if events is EventMode.NONE:
        return insert
    pushed = f"WITH pushed AS ({insert} RETURNING {_PUSHED_RETURNING})"
    made = UNIFORM_ENQUEUE_EVENTS if uniform else ENQUEUE_EVENTS
    if events is EventMode.STORE:
        return f"{pushed} INSERT INTO ojs_event ({_EVENT_COLUMN_LIST}) {made}"
    return f"{pushed}{_events_cte('ev', made, events)} SELECT * FROM ev"


# Why raw SQL: advisory locks have no ORM equivalent. The transaction-scoped variant is
# released at COMMIT/ROLLBACK, so a reaper that dies can never keep the leadership.
TRY_LOCK_SQL = "SELECT pg_try_advisory_xact_lock(hashtext(%s))"
# Why raw SQL: advisory locks have no ORM equivalent. 64-bit hashes of the keys, locked in
# the order given (sorted by the caller), until the transaction ends.
LOCK_KEYS_SQL = (
    "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0)))"
    " FROM unnest(%s::text[]) WITH ORDINALITY AS t(k, n)"
)

# Why raw SQL: the three statements below run on every fetch of an idle worker (the
# pickup path of a job pushed to an idle queue); compiled by the ORM each costs more
# than its round trip. Same conditions as JobQuerySet.due, Driver.touch_worker and
# the ORM driver's limited_candidates.
DUE_PROBE_SQL = """
SELECT 1 FROM ojs_job
WHERE ((state = 'scheduled' AND scheduled_at <= %(now)s)
       OR (state = 'retryable' AND next_attempt_at <= %(now)s))
  AND (%(all)s OR queue = ANY(%(queues)s::text[]))
LIMIT 1
"""
# An idle worker's fetch asks both questions of Driver.look in one lock-free statement.
# A row another transaction is promoting still reads as due (its old version), so the
# fetch then takes the path that waits for it.
_DUE_SQL = """EXISTS (SELECT 1 FROM ojs_job WHERE state = 'scheduled' AND scheduled_at <= %(now)s
                 AND queue = ANY(%(queues)s::text[]))
    OR EXISTS (SELECT 1 FROM ojs_job WHERE state = 'retryable' AND next_attempt_at <= %(now)s
                 AND queue = ANY(%(queues)s::text[]))"""
_LIMITED_SQL = """EXISTS (SELECT 1 FROM ojs_job WHERE state = 'available' AND rate_key IS NOT NULL
                 AND queue = ANY(%(queues)s::text[]))
    OR EXISTS (SELECT 1 FROM ojs_queue WHERE name = ANY(%(queues)s::text[])
                 AND limits IS NOT NULL)"""
LOOK_SQL = f"SELECT {_DUE_SQL},\n       {_LIMITED_SQL}\n"
# After a claim of claim_if_clear that found nothing: the look, and whether the queue has
# a job the claim could take (it may have been held back by a job due at its snapshot).
AFTER_EMPTY_CLAIM_SQL = f"""SELECT {_DUE_SQL},
       {_LIMITED_SQL},
       EXISTS (SELECT 1 FROM ojs_job WHERE state = 'available' AND queue = %(queue)s
                 AND rate_key IS NULL AND (stale_at IS NULL OR stale_at > %(now)s))
"""
# The claim of claim_if_clear: the same look, as a condition the claim checks once
# (an uncorrelated subquery: PostgreSQL evaluates it one time, before any row).
_CLEAR_SQL = f"NOT ({_DUE_SQL}\n    OR {_LIMITED_SQL})"
# A claim that may commit without waiting for the WAL flush (Driver.claim's durable=False):
# synchronous_commit off for its transaction only (set_config's is_local), set by the
# claim statement itself, so that a claim outside any transaction stays one statement.
# An uncorrelated condition: PostgreSQL evaluates it once, before the first row.
_RELAXED_COMMIT_SQL = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"
WORKER_FIELDS = tuple(Worker._meta.concrete_fields)
_WORKER_PARAMS = tuple(f"w{i}" for i in range(len(WORKER_FIELDS)))
TOUCH_WORKER_SQL = f"""INSERT INTO ojs_worker ({", ".join(f'"{f.column}"' for f in WORKER_FIELDS)})
VALUES ({", ".join(f"%({name})s" for name in _WORKER_PARAMS)})
ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = EXCLUDED.last_heartbeat_at"""
# An HTTP worker's fetch records its sign of life in its claim statement: one round trip
# instead of BEGIN, the upsert, the claim and COMMIT. The CTE runs whether or not the
# claim finds work (PostgreSQL runs every data-modifying CTE to completion).
TOUCH_WORKER_CTE = f"touched AS (\n{TOUCH_WORKER_SQL}\n), "
LIMITED_CANDIDATES_SQL = """
SELECT id, rate_key, rate_limit FROM ojs_job
WHERE state = 'available' AND queue = %(queue)s
  AND (rate_key IS NOT NULL
       OR EXISTS (SELECT 1 FROM ojs_queue q WHERE q.name = %(queue)s AND q.limits IS NOT NULL))
  AND (stale_at IS NULL OR stale_at > %(now)s)
ORDER BY priority DESC, id
LIMIT %(limit)s
"""

# Why raw SQL: the planner's statistics are only in PostgreSQL's catalog. The job table
# (or its partitions) when it holds twice the rows it held at its last analysis:
# autovacuum analyses a table after 10 % of it changed, but only a minute or more later,
# and a table filled in the meantime keeps the statistics of the empty one. Planned on
# those, a claim read every available job through ojs_job_state_queue_idx and sorted
# them to take the first 500 (40 ms instead of 20 ms with 50,000 waiting; 33 ms instead
# of 1 ms for one job with 100,000). Only tables this role may analyse (it owns them,
# or is a superuser): ANALYZE skips the others with a warning and leaves their count of
# changes as it was, so every pass would try again. Rows held, not rows changed: claims
# and completions change no row count, and counted as changes they made the reaper
# analyse the table halfway through every backlog a worker drained (128 ms of
# PostgreSQL's time for 20,000 jobs, amid the drain).
# The count of rows held lags, though: a session reports its inserts at most once a
# second, and one that then waits idle reports them up to 10 s later (PostgreSQL 15+),
# so a worker started right after a bulk push saw an empty table and drained 50,000
# jobs in 4.4-4.8 s instead of 2.9-3.3 (its plans, and every count of the jobs, read
# the whole table). A table that was all but empty at its last analysis or vacuum
# (fewer than ``min_pages`` pages) is analysed as soon as its file holds ``min_pages``
# and twice its pages then: a size PostgreSQL knows at once. The analysis records
# the pages it saw, so this happens once per filling, not once per pass.
STALE_JOB_TABLES_SQL = r"""
SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relname ~ '^ojs_job(_p\d{8}|_default)?$' AND c.relkind = 'r'
  AND pg_catalog.pg_table_is_visible(s.relid)
  AND pg_catalog.pg_has_role(c.relowner, 'USAGE')
  AND (s.n_live_tup >= GREATEST(%(min_rows)s, 2 * c.reltuples)
       OR (c.relpages < %(min_pages)s
           AND pg_catalog.pg_relation_size(c.oid)
               >= GREATEST(%(min_pages)s, 2 * c.relpages)
                  * current_setting('block_size')::bigint))
ORDER BY s.relname
"""

# Why raw SQL: LISTEN has no ORM equivalent.
LISTEN_SQL = "LISTEN " + CHANNEL


#: psycopg converts a statement's ``%(name)s`` placeholders once and caches the result,
#: but only for statements of at most this many characters (``_queries.py``); a longer
#: one is parsed again, by regular expression, on every call: 35 µs for a claim here.
PSYCOPG_CACHED_LENGTH = 4096


class _Shape(NamedTuple):
    """A claim's or completion's statement, built once per shape, and what its rows load."""

    sql: str
    fields: tuple[Any, ...]  # the model fields of the job columns, in the model's order
    attnames: tuple[str, ...]


def _shape(
    template: str, events_cte: str, fields: list[Any], events: EventMode, **extra: str
) -> _Shape:
    """The statement on one line: without the templates' line breaks and indentation, it
    stays well under :data:`PSYCOPG_CACHED_LENGTH` (none of these statements has a
    comment or a string literal over several lines)."""
    columns = ", ".join(f'c."{f.column}"' for f in fields)
    join = ""
    if events.returned:
        columns += ", " + ", ".join(f"e.{c}" for c in EVENT_COLUMNS)
        join = " LEFT JOIN ev AS e ON e.job_id = c.id"
    sql = template.format(events=events_cte, columns=columns, join=join, **extra)
    return _Shape(_one_line(sql), tuple(fields), tuple(f.attname for f in fields))


#: Claims of at most this many jobs carry their count in the statement's text (see
#: :func:`_claim_limit`): a few dozen variants of each shape, well within psycopg's cache
#: of 100 prepared statements per connection.
LITERAL_LIMIT_UP_TO = 64


def _claim_limit(limit: int) -> int | None:
    """The count a claim's text carries, or None for the ``%(limit)s`` parameter.

    With ``LIMIT %(limit)s``, a prepared claim is planned again on every call: the plan
    PostgreSQL would reuse (the generic one) must assume a limit of a tenth of the queue,
    which costs more than a plan made for the actual count plus the planning, so every
    call gets a plan of its own (``pg_prepared_statements``: 0 generic plans, 395 custom
    ones in 400 claims). Planning the claim took longer than running it for a few jobs
    (0.3 ms each): a claim of 10 took 0.98 ms, and 0.60 ms once planned once. With the
    count written in the text, the reused plan is the one a custom plan would be. Large
    claims keep the parameter: their planning is spread over their jobs, and the cache
    stays small.
    """
    return limit if 0 < limit <= LITERAL_LIMIT_UP_TO else None


# A worker fetches and completes with the same few shapes all day: everything but the
# parameters is worked out once per shape (its Python is most of what an idle worker
# spends between a push's notification and the claim going out).
# Each claim shape has up to LITERAL_LIMIT_UP_TO + 1 statements (one per small count):
# room for a process's few shapes, each with all of its counts.
@functools.lru_cache(maxsize=1024)
def _claim_shape(
    fields: tuple[str, ...] | None,
    events: EventMode,
    *,
    by_ids: bool,
    clear: bool,
    durable: bool,
    of_worker: bool,
    touch: bool,
    limit: int | None = None,
) -> _Shape:
    # The claim order is restored from priority: always load it (a deferred field would
    # cost one query per claimed job).
    model_fields = _model_fields(None if fields is None else [*fields, "priority"])
    # Without ids: jobs free of limits, in queues free of limits; with ids: those jobs.
    which = "id = ANY(%(ids)s)" if by_ids else "rate_key IS NULL"
    if clear:
        which += f" AND {_CLEAR_SQL}"
    if not durable:
        which += f" AND {_RELAXED_COMMIT_SQL}"
    gate = "q.paused" if by_ids else "(q.paused OR q.limits IS NOT NULL)"
    claim_events = CLAIM_EVENTS_OF_WORKER if of_worker else CLAIM_EVENTS
    return _shape(
        CLAIM_SQL, _events_cte("ev", claim_events, events), model_fields, events,
        which=which, gate=gate, returning=_returning(model_fields, _CLAIM_EVENT_COLUMNS),
        touch=TOUCH_WORKER_CTE if touch else "",
        limit="%(limit)s" if limit is None else str(int(limit)),
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def _complete_shape(
    fields: tuple[str, ...] | None, events: EventMode, one: bool, gated: bool = False
) -> _Shape:
    model_fields = _model_fields(fields)
    return _shape(
        COMPLETE_SQL, _events_cte("ev", COMPLETE_EVENTS, events), model_fields, events,
        returning=_returning(model_fields, _COMPLETE_EVENT_COLUMNS),
        which=COMPLETE_ONE if one else COMPLETE_MANY,
        queue_gate=COMPLETE_QUEUE_GATE if gated else "",
    )  # fmt: skip


def _one_line(sql: str) -> str:
    return re.sub(r"\s*\n\s*", " ", sql).strip()


def _returning(model_fields: list[Any], event_columns: Sequence[str]) -> str:
    """The ``RETURNING`` list of a claim or a completion: the columns asked for and those
    its events read. A worker asks for a few columns, and carrying whole rows (args,
    meta, errors…) through the statement's CTE costs."""
    if len(model_fields) == len(JOB_FIELDS):  # every column: the statement stays short
        return "j.*"
    wanted = dict.fromkeys([*(f.column for f in model_fields), *event_columns])
    return ", ".join(f'j."{column}"' for column in wanted)


@functools.lru_cache(maxsize=64)
def _push_one_sql(present: tuple[int, ...], with_event: bool) -> str:
    """PUSH_ONE_SQL for the job columns at ``present`` (non-NULL values)."""
    return PUSH_ONE_SQL.format(
        columns=", ".join(f'"{JOB_COLUMNS[i]}"' for i in present),
        values=", ".join(f"%({_PUSH_ONE_PARAMS[i]})s" for i in present),
        events=PUSH_ONE_EVENT_CTE if with_event else "",
    )


#: psycopg's own default: a statement is prepared on the server once it has run this many
#: times on a connection (its parse and plan are then reused; see :func:`_cursor`).
PREPARE_THRESHOLD = 5


def _cursor(connection: Any, *, binary: bool = False) -> Any:
    """A cursor of ``connection`` (Django's wrapper) that binds parameters on the server.

    Django's psycopg 3 backend gives client-side binding cursors (``ClientCursor``) unless
    ``OPTIONS["server_side_binding"]``: psycopg then splits and quotes every statement in
    Python, which costs more than the round trip on the hot paths here (a push binds
    about 26 parameters). A server-binding cursor sends the statement and its
    parameters apart. It is wrapped as Django wraps its own, so transactions, error
    translation, ``execute_wrapper`` hooks and query logging behave the same.

    Django opens psycopg connections with ``prepare_threshold=None`` (never prepare)
    unless the alias's ``OPTIONS`` name one. Client-side cursors (Django's own) never
    prepare whatever the threshold, so when ``OPTIONS`` leave it unset the connection
    gets psycopg's default of :data:`PREPARE_THRESHOLD`: the statements here are then
    parsed and planned once per connection instead of on every call (about 0.1 ms of a
    0.6 ms push). An explicit ``OPTIONS["prepare_threshold"] = None`` (for a
    transaction-mode PgBouncer older than 1.21) is respected.

    ``binary``: rows come back in PostgreSQL's binary format, which psycopg's C loaders
    read several times faster than text (a text ``timestamptz`` goes through Django's
    Python loader); ``jsonb`` then arrives decoded (see :meth:`PostgreSQLDriver._load`).
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw_connection = connection.connection
    if raw_connection.prepare_threshold is None and _may_prepare(connection):
        raw_connection.prepare_threshold = PREPARE_THRESHOLD
    if binary:
        # Registered on the connection, once: a cursor would copy the connection's map
        # of loaders to register its own (twice the cost of the cursor). Django reads
        # text only, so its own queries never meet a binary loader.
        adapters = raw_connection.adapters
        if adapters.get_loader(JSONB_OID, psycopg.pq.Format.BINARY) is not _JsonbBinaryLoader:
            adapters.register_loader(JSONB_OID, _JsonbBinaryLoader)
    with connection.wrap_database_errors:
        raw = psycopg.Cursor(raw_connection)
    if binary:
        raw.format = psycopg.pq.Format.BINARY
    if connection.queries_logged:
        return connection.make_debug_cursor(raw)
    return connection.make_cursor(raw)


def _kept_cursor(connection: Any) -> Any:
    """:func:`_cursor`, made once per connection and kept for its later calls (not to
    be closed by the caller), for a statement run on every call of a hot path.

    A psycopg cursor learns which dumper each parameter type takes on its first use of
    that type: a new psycopg cursor per push cost 4 µs more than a kept one, and with
    Django's wrapper made and closed each time 15 µs more (a single push's client CPU
    went from 74-80 to 58-64 µs in alternating runs). The kept one is made again when
    the connection is a new one (after a reconnection) or when queries are logged and
    were not (Django's ``CaptureQueriesContext``, ``DEBUG``), or the other way round.
    Django's connections belong to one thread each, and so does the kept cursor.
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    kept = connection.__dict__.get("_ojs_cursor")
    logged = connection.queries_logged
    if kept is not None and kept[0] is connection.connection and kept[1] == logged:
        connection.validate_thread_sharing()
        return kept[2]
    cursor = _cursor(connection)
    connection._ojs_cursor = (connection.connection, logged, cursor)
    return cursor


#: The type ``jsonb``'s object id (fixed in PostgreSQL's catalog).
JSONB_OID = 3802


class _JsonbBinaryLoader(Loader):
    """``jsonb`` in the binary format (a version byte, then the JSON text), decoded.

    psycopg's own loader hands ``json.loads`` bytes, which it first decodes after
    guessing their encoding: 2.1 µs for a job's ``args`` and as much for its usually
    empty ``meta``, against 0.9 µs here (a claim of 500 reads 1,000 of them).
    """

    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> Any:
        if data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format: {data[0]}")
        text = bytes(data[1:]).decode()
        return {} if text == "{}" else json.loads(text)


def _may_prepare(connection: Any) -> bool:
    """Whether the alias leaves statement preparation to us (``prepare_threshold`` unset)."""
    return "prepare_threshold" not in (connection.settings_dict.get("OPTIONS") or {})


#: The optional GIN indexes for ``args``/``meta`` containment (``@>``): index → column.
#: ``jsonb_path_ops`` indexes serve ``@>`` only, and are smaller and faster than the
#: default operator class. Created by ``manage.py ojs_search_index --create``.
SEARCH_INDEXES = {"ojs_job_args_gin": "args", "ojs_job_meta_gin": "meta"}
INDEX_VALID_SQL = """
SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = %(name)s AND pg_catalog.pg_table_is_visible(c.oid)
"""
INDEXES_PRESENT_SQL = """
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = ANY(%(names)s) AND i.indisvalid AND pg_catalog.pg_table_is_visible(c.oid)
"""


# Why a lock and not a query: a sequence number is taken when a row is inserted, but the
# row is visible only when its transaction commits, so the highest visible ``seq`` does
# not tell whether a lower one is still on its way. SHARE conflicts with the ROW
# EXCLUSIVE lock every INSERT holds until its transaction ends: once SHARE is granted, no
# transaction that inserted an event is still open, and any ``seq`` missing below the
# highest one is gone for good. The lock is held for one SELECT; pushes queue behind it
# while it waits, so the wait is short (``lock_timeout``) and the webhook dispatcher takes
# it only for a gap that outlived its ordinary wait.
SETTLED_EVENT_SEQ_SQL = (
    "LOCK TABLE ojs_event IN SHARE MODE",
    "SELECT coalesce(max(seq), 0) FROM ojs_event",
)


class PostgreSQLDriver(OrmDriver):
    vendor = "postgresql"

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
    ) -> Written:
        return self._claim(
            queue, limit, worker_id=worker_id, now=now, visibility_ms=visibility_ms,
            defaults=defaults, fields=fields, events=events, source=source, ids=ids,
            durable=durable,
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
    ) -> Written | None:
        # One statement: the claim, on the condition that nothing is due or limited (and
        # the worker's sign of life, when asked). Only an empty result needs a second
        # look, to tell an empty queue from a held one.
        def claim() -> Written:
            return self._claim(
                queue, limit, worker_id=worker_id, now=now, visibility_ms=visibility_ms,
                defaults=defaults, fields=fields, events=events, source=source, clear=True,
                durable=durable, touch=register,
            )  # fmt: skip

        written = claim()
        if written.jobs:
            return written
        with _cursor(connections[self.using]) as cursor:
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
    ) -> Written:
        params: dict[str, Any] = {
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
        shape = _claim_shape(
            None if fields is None else tuple(fields), events, by_ids=ids is not None,
            clear=clear, durable=durable, of_worker=worker_id is not None,
            touch=worker_row is not None, limit=_claim_limit(limit),
        )  # fmt: skip
        written = self._load(shape, params, events)
        # RETURNING has no order: restore the claim order.
        written.jobs.sort(key=lambda j: (-j.priority, j.id))
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
            "outcomes": _outcomes(items),
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
        shape = _complete_shape(
            None if fields is None else tuple(fields), events, one, queues is not None
        )
        return self._load(shape, params, events)

    def _load(self, shape: _Shape, params: dict[str, Any], events: EventMode) -> Written:
        # Model.from_db wants the values in the model's field order; the event columns
        # (when asked) follow the job columns in each row.
        # Binary rows: a claim's 20 columns of timestamps, UUIDs and JSON are read by
        # psycopg's C loaders, and jsonb arrives decoded with json.loads, which is all
        # JSONField.from_db_value does for the job's fields (none has a decoder).
        with _cursor(connections[self.using], binary=True) as cursor:
            cursor.execute(shape.sql, params)
            rows = cursor.fetchall()
        n = len(shape.fields)
        written = Written(loaded_jobs(self.using, shape.attnames, [row[:n] for row in rows]))
        if events.returned:
            written.events = [_event_row(row[n:]) for row in rows if row[n] is not None]
        return written

    def promote_due(
        self, *, now: datetime, queues: Sequence[str] | None, wait: bool, limit: int
    ) -> list[Job]:
        # A lock-free probe first: nearly always nothing is due. A row another
        # transaction is promoting still reads as due here (its old version), so the
        # locking pass below runs and waits for it when asked.
        with _cursor(connections[self.using]) as cursor:
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
        with _cursor(connection) as cursor:
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
        with _cursor(connections[self.using]) as cursor:
            return parts.layout(cursor, table)

    def partition_table(
        self, table: str, *, interval: str, start: datetime, end: datetime
    ) -> Partitions:
        with _cursor(connections[self.using]) as cursor:
            parts.convert(cursor, table, interval, start, end)
            found = parts.layout(cursor, table)
        assert found is not None
        return found

    def unpartition_table(self, table: str) -> None:
        with _cursor(connections[self.using]) as cursor:
            parts.revert(cursor, table)

    def add_partition(
        self, table: str, start: datetime, end: datetime, *, timeout: float
    ) -> Partition | None:
        try:
            with transaction.atomic(using=self.using), _cursor(connections[self.using]) as cursor:
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
            with transaction.atomic(using=self.using), _cursor(connections[self.using]) as cursor:
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
            with transaction.atomic(using=self.using), _cursor(connections[self.using]) as cursor:
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
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(TOUCH_WORKER_SQL, self._worker_params(worker_id, queues, now))

    def _worker_params(self, worker_id: str, queues: list[str], now: datetime) -> dict[str, Any]:
        """The parameters of ``TOUCH_WORKER_SQL`` (or its CTE) for a new worker row."""
        connection = connections[self.using]
        worker = Worker(id=worker_id, queues=queues, started_at=now, last_heartbeat_at=now)
        return {
            name: f.get_db_prep_save(getattr(worker, f.attname), connection)
            for name, f in zip(_WORKER_PARAMS, WORKER_FIELDS, strict=True)
        }

    def look(self, queues: Sequence[str], now: datetime) -> Look:
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(LOOK_SQL, {"now": now, "queues": list(queues)})
            due, limited = cursor.fetchone()
        return Look(due=bool(due), limited=bool(limited))

    def limited_candidates(self, queue: str, now: datetime, limit: int) -> list[tuple[Any, ...]]:
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(LIMITED_CANDIDATES_SQL, {"queue": queue, "now": now, "limit": limit})
            rows = cursor.fetchall()
        return [
            (id_, key, json.loads(wire) if isinstance(wire, str | bytes) else wire)
            for id_, key, wire in rows
        ]

    def push_one(
        self, job: Job, *, available: bool, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        values = _job_values(job)
        present = tuple(compress(_INDEXES, map(is_not, values, repeat(None))))
        names, given = map(_PUSH_ONE_PARAMS.__getitem__, present), map(values.__getitem__, present)
        params: dict[str, Any] = dict(zip(names, given, strict=True))
        params["available"] = available
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
                event_data=_dumps(event.data),  # JSON text: psycopg's C code sends it
            )
        _kept_cursor(connections[self.using]).execute(_push_one_sql(present, events.stored), params)
        return rows if events.returned else []

    def push_many(
        self, batches: Iterable[Sequence[Job]], *, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        connection = connections[self.using]
        casts = _job_casts(connection)
        queues: set[str] = set()
        available: set[str] = set()
        sent: list[tuple[Any, Sequence[Job]]] = []
        cursor = None
        # Each batch is sent as soon as it is made, in pipeline mode: PostgreSQL writes
        # it while the caller makes the next. The results (and errors, as Django's) are
        # read at the end. The queues' registration and NOTIFY go last.
        with _pipelined(connection):
            for jobs in batches:
                if not jobs:
                    continue
                shape, params = _batch_params(jobs)
                params.update(now=now, source=source)
                if cursor is None or events.returned:  # a batch's events: its cursor's rows
                    cursor = _cursor(connection)
                sql = _push_batch_sql(shape, casts, events, _uniform(shape, params))
                cursor.execute(sql, params)
                sent.append((cursor, jobs))
                batch_queues, batch_available = pushed_queues(jobs)
                queues |= batch_queues
                available |= batch_available
            if queues:
                self.after_push(queues, available)
        rows: list[EventRow] = []
        if events.returned:
            for cursor, jobs in sent:
                order = {job.id: i for i, job in enumerate(jobs)}
                made = (_event_row(r) for r in cursor.fetchall())
                rows.extend(sorted(made, key=lambda r: order[r.job_id]))
        return rows

    def insert_events(self, rows: list[EventRow]) -> None:
        if not rows:
            return
        with _cursor(connections[self.using]) as cursor:
            if len(rows) >= COPY_THRESHOLD:
                with cursor.copy(COPY_EVENTS_SQL) as copy:
                    for row in rows:
                        copy.write_row(_event_values(row))
            else:
                sql = INSERT_EVENTS_SQL.format(rows=", ".join([_EVENT_PLACEHOLDERS] * len(rows)))
                cursor.execute(sql, [v for row in rows for v in _event_values(row)])

    def after_push(self, queues: set[str], available: set[str]) -> None:
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(
                AFTER_PUSH_SQL, {"queues": sorted(queues), "available": sorted(available)}
            )

    def lock_keys(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(LOCK_KEYS_SQL, [sorted(set(keys))])

    def refresh_statistics(self, *, min_rows: int, min_pages: int) -> list[str]:
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(STALE_JOB_TABLES_SQL, {"min_rows": min_rows, "min_pages": min_pages})
            stale = [name for (name,) in cursor.fetchall()]
            for name in stale:  # names from the catalog, matched by the pattern above
                cursor.execute(f'ANALYZE "{name}"')
        return stale

    def try_lock(self, name: str) -> bool:
        with _cursor(connections[self.using]) as cursor:
            cursor.execute(TRY_LOCK_SQL, [name])
            return bool(cursor.fetchone()[0])

    def listener(self, queues: list[str]) -> PostgreSQLListener:
        return PostgreSQLListener(self.using, queues)

    def wait_finished(self, job_id: Any, timeout: float) -> str | None:
        # Own autocommit connection: LISTEN first, then mark the job awaited (the trigger
        # of migration 0013 NOTIFYs a terminal transition of an awaited job), then read
        # its state. A transition committed before the mark is seen by the read; one
        # after it is notified: none is missed. Notifications of other jobs are skipped.
        params = connections[self.using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
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
                for _ in conn.notifies(timeout=min(left, 5.0), stop_after=1):
                    break  # any notification: read the state again (cheap, one row)


def _model_fields(fields: Sequence[str] | None) -> list[Any]:
    # Only the asked-for columns: building a full 45-field model per claimed row is most
    # of a worker's fetch cost. The other fields are deferred (loaded on access).
    if fields is None:
        return list(JOB_FIELDS)
    wanted = {"id", *fields}
    return [f for f in JOB_FIELDS if f.name in wanted]


def _event_row(values: Sequence[Any]) -> EventRow:
    id_, type_, source, subject, time, job_id, queue, data = values
    if isinstance(data, str | bytes):  # Django loads jsonb as text; JSONField decodes it
        data = json.loads(data)
    return EventRow(id_, type_, source, subject, time, job_id, queue, data)


def _dumps(value: Any) -> str:
    # Most jobs carry empty meta/tags/extra/errors: skip the encoder for those.
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value)


_JOB_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


_INDEXES = tuple(range(len(_JOB_ATTNAMES)))
_GET_VALUES = itemgetter(*_JOB_ATTNAMES)


def _job_values(job: Job) -> list[Any]:
    # Plain attribute values, read in C: faster than getattr on the hot paths.
    values = list(_GET_VALUES(job.__dict__))
    for i in _JSON_JOB_COLUMNS:
        if values[i] is not None:
            # JSON text, not a Jsonb wrapper: a str is formatted by psycopg's C code,
            # a wrapper calls a Python dumper per value (5 per row on the bulk path).
            values[i] = _dumps(values[i])
    return values


@contextlib.contextmanager
def _pipelined(connection: Any) -> Iterator[None]:
    """Statements executed inside go to the server without waiting for their results,
    which are read (and their errors raised, as Django's) at the end of the block.
    Without pipeline support in the client library (libpq < 14), they run one by one."""
    if not psycopg.Pipeline.is_supported():
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


def _batch_params(jobs: Sequence[Job]) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The shape of :func:`_push_batch_sql` for ``jobs`` and its parameters: per
    column, the values of a column that varies (the ids always do: they make the
    rows), the one value the batch shares, or nothing when every job leaves it NULL.
    JSON values go as JSON text (see :func:`_job_values`)."""
    shape: list[int] = []
    params: dict[str, Any] = {}
    size = len(jobs)
    for i, column in enumerate(zip(*[_GET_VALUES(job.__dict__) for job in jobs], strict=True)):
        name = f"c{i}"
        if i in _JSON_JOB_COLUMNS and column.count(None) != size:
            if column.count({}) == size or column.count([]) == size:  # most meta, tags...
                shape.append(_SHARED)
                params[name] = _dumps(column[0])
                continue
            if column.count(column[0]) != size and None not in column:  # most args
                # One JSON array of the batch's values, which PostgreSQL takes apart:
                # one call of the encoder instead of one per job (1 µs each).
                shape.append(_JSON_ARRAY)
                params[name] = json.dumps(column)
                continue
            # Compared as JSON text: 1 == True == 1.0 in Python, not in JSON.
            column = tuple([None if v is None else _dumps(v) for v in column])
        first = column[0]
        if i != _ID_INDEX and column.count(first) == size:
            if first is not None:
                shape.append(_SHARED)
                params[name] = first
            else:
                shape.append(_NULL)
        else:
            shape.append(_VARYING)
            params[name] = list(column)
    return tuple(shape), params


def _outcomes(items: Sequence[Completion]) -> str:
    """COMPLETE_SQL's ``outcomes``: ``{job id: {"a": attempt, "r": result}}`` as JSON
    text, a key left out when its value is None (a NULL result stays SQL NULL)."""
    outcomes: dict[str, dict[str, Any]] = {}
    for item in items:
        outcome: dict[str, Any] = {}
        if item.attempt is not None:
            outcome["a"] = item.attempt
        if item.result is not None:
            outcome["r"] = item.result
        outcomes[str(item.job_id)] = outcome
    return json.dumps(outcomes)


def _event_values(row: tuple[Any, ...]) -> list[Any]:
    values = list(row)
    values[-1] = Jsonb(values[-1], dumps=_dumps)
    return values


def _unless_lock_busy(exc: OperationalError, table: str) -> None:
    """Re-raise ``exc`` unless it is a lock not had within ``lock_timeout``."""
    if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
        raise exc
    logger.info("partitions of %s unchanged: the table's lock was busy", table)


class PostgreSQLListener:
    """A dedicated autocommit connection that ``LISTEN``s for pushes to some queues.

    When the connection is lost (a server restart, ``pg_terminate_backend``), ``wait``
    opens a new one and ``LISTEN``s again, then returns True once: a push notified while
    nobody listened is lost, so the caller should look for work. While the server is
    away, each ``wait`` tries once and then sleeps a back-off delay (at most its timeout).
    """

    def __init__(self, using: str, queues: list[str]):
        params = connections[using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        self._params = params
        self._queues = set(queues)
        self._lock = threading.Lock()
        self._closed = False
        #: Set by wake() and close(): ends a back-off sleep while disconnected.
        self._woken = threading.Event()
        self._outage = resilience.Outage("listener", logger)
        self._conn: psycopg.Connection[Any] | None = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(**self._params, autocommit=True)
        try:
            conn.execute(LISTEN_SQL)
        except BaseException:
            conn.close()
            raise
        return conn

    def wait(self, timeout: float) -> bool:
        if self._closed:
            return False
        conn = self._conn
        if conn is None:
            return self._reconnect(timeout)
        try:
            for note in conn.notifies(timeout=timeout, stop_after=1):
                # An empty payload is wake(): return without claiming to have work.
                return bool(note.payload) and (not self._queues or note.payload in self._queues)
        except Exception as exc:
            if self.closed:  # close() from another thread ends the wait
                return False
            if not resilience.is_connection_error(exc):
                raise
            self._drop(conn, exc)
            return self._reconnect(timeout)
        return False

    def _drop(self, conn: psycopg.Connection[Any], exc: BaseException) -> None:
        self._outage.failed(exc)  # logs the outage; the first reconnect is not delayed
        with self._lock:
            if self._conn is conn:
                self._conn = None
        conn.close()

    def _reconnect(self, timeout: float) -> bool:
        """Listen on a new connection: True (look for missed work) when it worked;
        otherwise sleep a back-off delay, at most ``timeout``, and return False."""
        try:
            conn = self._connect()
        except resilience.CONNECTION_ERRORS as exc:
            delay = self._outage.failed(exc)
            self._woken.wait(min(delay, timeout))
            self._woken.clear()
            return False
        with self._lock:
            if self._closed:
                conn.close()
                return False
            self._conn = conn
        self._outage.succeeded()
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def wake(self) -> None:
        # NOTIFY on our own channel from a short-lived connection interrupts wait().
        self._woken.set()  # or, while disconnected, its back-off sleep
        with self._lock:
            if self._closed or self._conn is None:
                return
            try:
                with psycopg.connect(**self._params, autocommit=True) as conn:
                    conn.execute("SELECT pg_notify(%s, '')", [CHANNEL])
            except resilience.CONNECTION_ERRORS:
                # The database is away: wait() notices by itself, within its timeout.
                logger.debug("could not wake the listener: database unavailable")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._woken.set()
            if self._conn is not None:
                self._conn.close()
