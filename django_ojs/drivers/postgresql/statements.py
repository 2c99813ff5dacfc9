"""The PostgreSQL driver's statements: each a named constant with the reason the ORM is
not enough, or the pieces the shapes (:mod:`.shapes`) are built from.

The only SQL of django-ojs, with the rest of this package (the architecture test checks
that no module outside ``drivers`` holds any).
"""

from __future__ import annotations

from collections.abc import Sequence

from django_ojs.drivers.base import (
    EventMode,
)
from django_ojs.models import Job, Worker

#: SQLSTATE of a lock not had within lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"


CHANNEL = "ojs_job_available"


JOB_FIELDS = tuple(Job._meta.concrete_fields)


JOB_COLUMNS = tuple(f.column for f in JOB_FIELDS)


JSON_JOB_COLUMNS = frozenset(
    i for i, f in enumerate(JOB_FIELDS) if f.get_internal_type() == "JSONField"
)


EVENT_COLUMNS = ("id", "type", "source", "subject", "time", "job_id", "queue", "data")


EVENT_COLUMN_LIST = ", ".join(EVENT_COLUMNS)


EVENT_PLACEHOLDERS = "(" + ", ".join(["%s"] * len(EVENT_COLUMNS)) + ")"


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


def event_cte_sql(name: str, select: str, mode: EventMode) -> str:
    """A CTE ``name`` whose rows are the events ``select`` builds.

    Stored modes insert them into ``ojs_event`` (``RETURNING`` them when they are to be
    returned); RETURN only builds them (``OJS_STORE_EVENTS`` off and a receiver wants
    them); NONE adds no CTE.
    """
    if mode is EventMode.NONE:
        return ""
    if mode.stored:
        returning = f" RETURNING {EVENT_COLUMN_LIST}" if mode.returned else ""
        select = f"INSERT INTO ojs_event ({EVENT_COLUMN_LIST}) {select}{returning}"
    return f", {name} AS ({select})"


# Why raw SQL: the claim must be ONE round trip that locks, updates and returns the rows
# (as Oban, River and procrastinate do). The ORM cannot express UPDATE … FROM (SELECT …
# FOR UPDATE SKIP LOCKED) … RETURNING. The CTE is an optimisation fence: PostgreSQL plans
# the inner SELECT on its own, walking ojs_job_claim_idx (queue, priority DESC, vtime, id) over
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
    ORDER BY priority DESC, vtime, id
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


# A fetch limited to some tenants (an API key's, X-OJS-Tenant): their jobs only. One
# tenant (the header's, a key of one) is a scalar, so that ojs_job_tenant_claim_idx
# (partial: jobs that have a tenant) gives its jobs in claim order, with no sort of them;
# several are an array (the planner then walks either index).
TENANT_SQL = "tenant = %(tenant)s AND tenant <> ''"


TENANTS_SQL = "tenant = ANY(%(tenants)s::text[]) AND tenant <> ''"


# What the job.started events read from the claimed rows.
CLAIM_EVENT_COLUMNS = ("id", "type", "queue", "state", "attempt", "meta")


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
COMPLETE_EVENT_COLUMNS = (
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


# Registering the queues of a push, in its transaction. Its workers are woken after the
# commit, by the notifier (NOTIFY_SQL): see drivers/postgresql/notifier.py.
REGISTER_QUEUES_SQL = """
INSERT INTO ojs_queue (name, paused, created_at)
SELECT name, false, now() FROM unnest(%(queues)s::text[]) AS name
ON CONFLICT (name) DO NOTHING
"""


# Why raw SQL: the notifier wakes the listeners of some queues in one statement, whose
# transaction commits without waiting for the disk (set_config(..., true): for this
# transaction only, so it cannot leak to another client through a pooler). A NOTIFY
# holds a lock for the whole database from its commit's start to its end; a commit that
# waits for no flush holds it for microseconds.
# A wake-up sent in the caller's transaction, delivered by its commit: for transactions
# managed by hand (autocommit off, no atomic block), whose commit Django cannot see.
NOTIFY_IN_TRANSACTION_SQL = f"SELECT pg_notify('{CHANNEL}', name) FROM unnest(%s::text[]) AS name"


NOTIFY_SQL = f"""
WITH settings AS (SELECT set_config('synchronous_commit', 'off', true))
SELECT pg_notify('{CHANNEL}', name) FROM settings, unnest(%s::text[]) AS name
"""


# Why raw SQL: a single push must be as cheap as one insert. The ORM needs four round
# trips (BEGIN, INSERT job, INSERT event, COMMIT) plus one for the queue; these
# data-modifying CTEs do all of it in ONE statement, which PostgreSQL runs atomically, so
# outside a caller's transaction no BEGIN/COMMIT is needed at all. The workers are woken
# on its commit, or after it by the notifier (drivers/postgresql/notifier.py).
# Only the job's non-NULL columns are listed (a NULL column is what the INSERT leaves
# out), and the queue name is one parameter used thrice: the statement stays
# under psycopg's 50 parameters, so its conversion to $n placeholders is cached, and
# psycopg prepares it on the server (see server_cursor); a few shapes cover a program's pushes.
PUSH_ONE_SQL = """
WITH job AS (
    INSERT INTO ojs_job ({columns}) VALUES ({values})
){events}{tail}
"""
#: The end of PUSH_ONE_SQL: its queue registered; the workers woken after the commit.
PUSH_ONE_TAIL = """
INSERT INTO ojs_queue (name, paused, created_at) VALUES (%(queue)s, false, now())
ON CONFLICT (name) DO NOTHING"""
#: The end of PUSH_ONE_SQL when no other push of the process is under way: its queue
#: registered and its workers woken by its own commit (see drivers/postgresql/notifier.py).
PUSH_ONE_NOTIFY_TAIL = f""", queue AS (
    INSERT INTO ojs_queue (name, paused, created_at) VALUES (%(queue)s, false, now())
    ON CONFLICT (name) DO NOTHING
)
SELECT pg_notify('{CHANNEL}', %(queue)s)"""


_QUEUE_INDEX = JOB_COLUMNS.index("queue")


#: The parameter of each job column in PUSH_ONE_SQL (the queue's is used thrice).
PUSH_ONE_PARAMS = tuple(
    "queue" if i == _QUEUE_INDEX else f"job{i}" for i in range(len(JOB_COLUMNS))
)


# The event's subject, job id and queue are the job's own parameters.
_JOB_ID_PARAM = PUSH_ONE_PARAMS[JOB_COLUMNS.index("id")]


PUSH_ONE_EVENT_CTE = f""", event AS (
    INSERT INTO ojs_event ({EVENT_COLUMN_LIST})
    VALUES (%(event_id)s, %(event_type)s, %(source)s, %({_JOB_ID_PARAM})s::text, %(now)s,
            %({_JOB_ID_PARAM})s, %(queue)s, %(event_data)s)
)"""


# Why raw SQL: bulk events go through COPY, which is an order of magnitude faster than
# a multi-row INSERT prepared by the ORM (per-field preparation dominates bulk_create's
# cost).
COPY_EVENTS_SQL = f"COPY ojs_event ({EVENT_COLUMN_LIST}) FROM STDIN"


# One event row: one INSERT (COPY costs an extra round trip).
INSERT_EVENT_SQL = f"INSERT INTO ojs_event ({EVENT_COLUMN_LIST}) VALUES {EVENT_PLACEHOLDERS}"


# A few event rows: one INSERT of arrays, a column each, whatever their number. A
# multi-row VALUES list had 8 parameters a row: past 50 of them psycopg converts the
# statement's placeholders again at every call and never prepares it (about 0.3 ms of
# CPU a heartbeat of 10 jobs).
INSERT_EVENTS_SQL = f"""
INSERT INTO ojs_event ({EVENT_COLUMN_LIST})
SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::timestamptz[],
                     %s::uuid[], %s::text[], %s::text[]::jsonb[])
"""


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
CLEAR_SQL = f"NOT ({_DUE_SQL}\n    OR {_LIMITED_SQL})"


# A claim that may commit without waiting for the WAL flush (Driver.claim's durable=False):
# synchronous_commit off for its transaction only (set_config's is_local), set by the
# claim statement itself, so that a claim outside any transaction stays one statement.
# An uncorrelated condition: PostgreSQL evaluates it once, before the first row.
RELAXED_COMMIT_SQL = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"


WORKER_FIELDS = tuple(Worker._meta.concrete_fields)


WORKER_PARAMS = tuple(f"w{i}" for i in range(len(WORKER_FIELDS)))


TOUCH_WORKER_SQL = f"""INSERT INTO ojs_worker ({", ".join(f'"{f.column}"' for f in WORKER_FIELDS)})
VALUES ({", ".join(f"%({name})s" for name in WORKER_PARAMS)})
ON CONFLICT (id) DO UPDATE SET last_heartbeat_at = EXCLUDED.last_heartbeat_at"""


# An HTTP worker's fetch records its sign of life in its claim statement: one round trip
# instead of BEGIN, the upsert, the claim and COMMIT. The CTE runs whether or not the
# claim finds work (PostgreSQL runs every data-modifying CTE to completion).
TOUCH_WORKER_CTE = f"touched AS (\n{TOUCH_WORKER_SQL}\n), "


# Why raw SQL: a heartbeat writes its worker's row and reads the directive waiting for it
# in one statement (the ORM's update cannot return a column: an UPDATE then a SELECT).
# {assignments}: the columns the beat carries, as "column" = %(column)s.
RECORD_BEAT_SQL = """
UPDATE ojs_worker SET {assignments} WHERE id = %(worker_id)s RETURNING directive
"""


LIMITED_CANDIDATES_SQL = """
SELECT id, rate_key, rate_limit, tenant FROM ojs_job
WHERE state = 'available' AND queue = %(queue)s
  AND (rate_key IS NOT NULL
       OR EXISTS (SELECT 1 FROM ojs_queue q WHERE q.name = %(queue)s AND q.limits IS NOT NULL))
  AND (stale_at IS NULL OR stale_at > %(now)s)
ORDER BY priority DESC, vtime, id
LIMIT %(limit)s
"""


# A claim while some tenants have a max_concurrency (lifecycle.tenantlimits): the jobs free
# of rate limits in claim order (ojs_job_claim_idx), leaving out those of tenants at their
# cap, locked once chosen. The window (the inner LIMIT) bounds the rows read when such a
# tenant's jobs come first; the outer LIMIT stops the reading once enough are found
# (PostgreSQL pulls rows through the subquery only as the outer query asks for them).
# Rows are locked after the filter, through the join on the primary key: a lock on each
# row read (FOR UPDATE in the window) wrote 1,000 rows per claim behind a capped tenant's
# backlog (70 ms). A row another claim holds is skipped; one it has claimed meanwhile
# fails the state check PostgreSQL repeats on the row it locks.
# The tenants at their cap are found first, once (an uncorrelated subquery), each by a
# count of its active jobs along ojs_job_tenant_idx (a count of at most its cap).
_HELD_SQL = """ARRAY(SELECT c.t FROM unnest(%(capped)s::text[], %(caps)s::int[]) AS c(t, n)
    WHERE (SELECT count(*) FROM ojs_job a
           WHERE a.state = 'active' AND a.tenant = c.t AND a.tenant <> '') >= c.n)"""


_CAPPED_SQL = """
SELECT j.id, j.tenant FROM (
    SELECT id, tenant, priority, vtime FROM ojs_job
    WHERE state = 'available' AND queue = %(queue)s AND rate_key IS NULL{scope}
      AND (stale_at IS NULL OR stale_at > %(now)s)
    ORDER BY priority DESC, vtime, id
    LIMIT %(window)s
) w JOIN ojs_job j ON j.id = w.id
WHERE w.tenant <> ALL({held}) AND j.state = 'available'
ORDER BY w.priority DESC, w.vtime, w.id
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED
"""


CAPPED_CANDIDATES_SQL = _CAPPED_SQL.format(scope="", held=_HELD_SQL)


# The same, for a fetch limited to some tenants (an API key's).
CAPPED_TENANT_CANDIDATES_SQL = _CAPPED_SQL.format(
    scope="\n      AND tenant = ANY(%(tenants)s::text[]) AND tenant <> ''", held=_HELD_SQL
)


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


#: The job types present, one index probe each: a "skip scan", a recursive query that
#: jumps from one type to the next along ``ojs_job_type_idx`` (PostgreSQL 15 has no skip
#: scan of its own), instead of reading every row for a ``DISTINCT``.
DISTINCT_TYPES_SQL = """
WITH RECURSIVE t(type, n) AS (
    (SELECT type, 1 FROM ojs_job ORDER BY type LIMIT 1)
    UNION ALL
    SELECT (SELECT j.type FROM ojs_job j WHERE j.type > t.type ORDER BY j.type LIMIT 1),
           t.n + 1
    FROM t WHERE t.type IS NOT NULL AND t.n < %s
)
SELECT type FROM t WHERE type IS NOT NULL
"""


# Why raw SQL: a push of a tenant's job reads where its tenant stands in its queue (see
# lifecycle.fairness) in ONE round trip for every (queue, tenant, priority) it pushes to,
# instead of two probes and a weight read each through the ORM. Each subquery is one
# index probe: the head along ojs_job_claim_idx (queue, priority, then vtime ascending,
# past the jobs without a tenant, whose vtime is 0), the tail along
# ojs_job_tenant_claim_idx backwards, the weight by primary key (a noisy neighbour's
# throttled weight while its throttle lasts, multi-tenancy §9.2).
# The tail names its tenant as a range of one (>= and <=) and orders by it: with
# ``tenant = k.t`` the planner, which cannot tell a small tenant from a large one,
# walked ojs_job_claim_idx backwards instead, filtering on the tenant, and a push of a
# tenant with few jobs beside one with 50,000 waiting read all 50,000 (69 ms; 0.1 ms
# along the tenant's index). No other index gives that order without a sort.
FAIR_BASES_SQL = """
SELECT k.q, k.t, k.p,
    (SELECT j.vtime FROM ojs_job j
     WHERE j.state = 'available' AND j.queue = k.q AND j.priority = k.p AND j.vtime > 0
     ORDER BY j.vtime LIMIT 1),
    (SELECT j.vtime FROM ojs_job j
     WHERE j.state = 'available' AND j.queue = k.q AND j.tenant >= k.t AND j.tenant <= k.t
       AND j.tenant <> '' AND j.priority = k.p
     ORDER BY j.tenant DESC, j.vtime DESC LIMIT 1),
    (SELECT CASE WHEN w.throttled_weight IS NOT NULL AND w.throttled_until > now()
                 THEN w.throttled_weight ELSE w.weight END
     FROM ojs_tenant w WHERE w.tenant_id = k.t)
FROM unnest(%(queues)s::text[], %(tenants)s::text[], %(priorities)s::int[]) AS k(q, t, p)
"""


#: The tenants jobs name, after ``%(after)s``: the same skip scan along ojs_job_tenant_idx
#: (partial: jobs that have a tenant), one probe per tenant.
DISTINCT_TENANTS_SQL = """
WITH RECURSIVE t(tenant, n) AS (
    (SELECT tenant, 1 FROM ojs_job WHERE tenant > %(after)s AND tenant <> ''
     ORDER BY tenant LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant FROM ojs_job j WHERE j.tenant > t.tenant AND j.tenant <> ''
            ORDER BY j.tenant LIMIT 1),
           t.n + 1
    FROM t WHERE t.tenant IS NOT NULL AND t.n < %(limit)s
)
SELECT tenant FROM t WHERE tenant IS NOT NULL
"""


# A page of tenants' jobs by state (the admin's tenants page, GET /admin/tenants): one
# count per (tenant, state), each an index-only probe of ojs_job_tenant_idx that stops
# after %(cap)s entries, so a page costs at most tenants x states x cap entries read
# whatever the table holds. ``j.tenant <> ''`` lets the planner use the partial index.
TENANT_COUNTS_SQL = """
SELECT t.tenant, s.state,
       (SELECT count(*) FROM (SELECT 1 FROM ojs_job j
                              WHERE j.tenant = t.tenant AND j.tenant <> '' AND j.state = s.state
                              LIMIT %(cap)s) c)
FROM unnest(%(tenants)s::text[]) AS t(tenant) CROSS JOIN unnest(%(states)s::text[]) AS s(state)
"""

# Each tenant's next job in each queue: the first entry of ojs_job_tenant_claim_idx
# (queue, tenant, -priority, vtime, id) for every (queue row, tenant) pair: one index
# descent each, tenants x queues of them.
TENANT_HEADS_SQL = """
SELECT {outer}
FROM unnest(%(tenants)s::text[]) AS t(tenant)
CROSS JOIN ojs_queue q
CROSS JOIN LATERAL (
    SELECT {inner} FROM ojs_job j
    WHERE j.queue = q.name AND j.tenant = t.tenant AND j.tenant <> ''
      AND j.state = 'available'
    ORDER BY j.priority DESC, j.vtime, j.id
    LIMIT 1
) h
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

# How far a standby is behind its primary: 0 when it replayed all the WAL it received (an
# idle primary sends none, and the age of the last replayed commit would grow for nothing),
# else the age of the last commit it replayed. NULL on a primary (not in recovery).
REPLICA_LAG_SQL = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())
       END
"""
