"""Statement shapes and parameters: the text of a claim, ACK or push for its case
(how many rows, which columns, whether events are stored), cached, and the parameters
made from jobs and outcomes, the way psycopg sends them fastest.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple

from psycopg.types.json import Jsonb

from django_ojs.drivers.base import (
    Completion,
    EventMode,
    EventRow,
)
from django_ojs.drivers.postgresql.statements import (
    CLAIM_EVENT_COLUMNS,
    CLAIM_EVENTS,
    CLAIM_EVENTS_OF_WORKER,
    CLAIM_SQL,
    CLEAR_SQL,
    COMPLETE_EVENT_COLUMNS,
    COMPLETE_EVENTS,
    COMPLETE_MANY,
    COMPLETE_ONE,
    COMPLETE_QUEUE_GATE,
    COMPLETE_SQL,
    ENQUEUE_EVENTS,
    EVENT_COLUMN_LIST,
    EVENT_COLUMNS,
    JOB_COLUMNS,
    JOB_FIELDS,
    JSON_JOB_COLUMNS,
    PUSH_ONE_EVENT_CTE,
    PUSH_ONE_NOTIFY_TAIL,
    PUSH_ONE_PARAMS,
    PUSH_ONE_SQL,
    PUSH_ONE_TAIL,
    RELAXED_COMMIT_SQL,
    TENANT_SQL,
    TENANTS_SQL,
    TOUCH_WORKER_CTE,
    UUID7_SQL,
    event_cte_sql,
)
from django_ojs.models import Job

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


#: The events of a uniform batch (see :func:`is_uniform`): its jobs differ only in their
#: ids (and arguments), and an event's data has no job id (it is a column, see
#: ``job_data``), so their events' data are one object, built once per statement (an
#: uncorrelated subquery).
UNIFORM_ENQUEUE_EVENTS = """SELECT {uuid7} AS id, 'job.enqueued' AS type, %(source)s::text AS source,
        id::text AS subject, %(now)s::timestamptz AS time, id AS job_id, queue,
        (SELECT jsonb_build_object('job_type', %(c{type})s::text, 'state', %(c{state})s::text,
                                   'priority', %(c{priority})s::integer)) AS data
    FROM pushed""".format(uuid7=UUID7_SQL, **_COLUMN)


def is_uniform(shape: tuple[int, ...], params: dict[str, Any]) -> bool:
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


def job_casts(connection: Any) -> tuple[str, ...]:
    """Each job column's type in SQL, as the parameters of a pushed batch are cast."""
    global _casts
    if _casts is None:
        _casts = tuple(str(f.db_type(connection)) for f in JOB_FIELDS)
    return _casts


@functools.lru_cache(maxsize=128)
def push_batch_sql(
    shape: tuple[int, ...], casts: tuple[str, ...], events: EventMode, uniform: bool = False
) -> str:
    """The statement of a pushed batch whose columns have ``shape`` (see
    :func:`batch_params`): its jobs, and their events stored (nobody wants them
    back), returned (``event_emitted`` receivers), only built, or none. ``uniform``:
    the batch is (:func:`is_uniform`)."""
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
        return f"{pushed} INSERT INTO ojs_event ({EVENT_COLUMN_LIST}) {made}"
    return f"{pushed}{event_cte_sql('ev', made, events)} SELECT * FROM ev"


#: psycopg converts a statement's ``%(name)s`` placeholders once and caches the result,
#: but only for statements of at most this many characters (``_queries.py``); a longer
#: one is parsed again, by regular expression, on every call: 35 µs for a claim here.
PSYCOPG_CACHED_LENGTH = 4096


class Shape(NamedTuple):
    """A claim's or completion's statement, built once per shape, and what its rows load."""

    sql: str
    fields: tuple[Any, ...]  # the model fields of the job columns, in the model's order
    attnames: tuple[str, ...]


def _shape(
    template: str, events_cte: str, fields: list[Any], events: EventMode, **extra: str
) -> Shape:
    """The statement on one line: without the templates' line breaks and indentation, it
    stays well under :data:`PSYCOPG_CACHED_LENGTH` (none of these statements has a
    comment or a string literal over several lines)."""
    columns = ", ".join(f'c."{f.column}"' for f in fields)
    join = ""
    if events.returned:
        columns += ", " + ", ".join(f"e.{c}" for c in EVENT_COLUMNS)
        join = " LEFT JOIN ev AS e ON e.job_id = c.id"
    sql = template.format(events=events_cte, columns=columns, join=join, **extra)
    return Shape(_one_line(sql), tuple(fields), tuple(f.attname for f in fields))


#: Claims of at most this many jobs carry their count in the statement's text (see
#: :func:`claim_limit`): a few dozen variants of each shape, well within psycopg's cache
#: of 100 prepared statements per connection.
LITERAL_LIMIT_UP_TO = 64


def claim_limit(limit: int) -> int | None:
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
def claim_shape(
    fields: tuple[str, ...] | None,
    events: EventMode,
    *,
    by_ids: bool,
    clear: bool,
    durable: bool,
    of_worker: bool,
    touch: bool,
    limit: int | None = None,
    scoped: int = 0,
) -> Shape:
    # The claim order is restored from priority: always load it (a deferred field would
    # cost one query per claimed job).
    model_fields = _model_fields(None if fields is None else [*fields, "priority", "vtime"])
    # Without ids: jobs free of limits, in queues free of limits; with ids: those jobs.
    which = "id = ANY(%(ids)s)" if by_ids else "rate_key IS NULL"
    if clear:
        which += f" AND {CLEAR_SQL}"
    if not durable:
        which += f" AND {RELAXED_COMMIT_SQL}"
    if scoped:
        which += f" AND {TENANT_SQL if scoped == 1 else TENANTS_SQL}"
    gate = "q.paused" if by_ids else "(q.paused OR q.limits IS NOT NULL)"
    claim_events = CLAIM_EVENTS_OF_WORKER if of_worker else CLAIM_EVENTS
    return _shape(
        CLAIM_SQL, event_cte_sql("ev", claim_events, events), model_fields, events,
        which=which, gate=gate, returning=_returning(model_fields, CLAIM_EVENT_COLUMNS),
        touch=TOUCH_WORKER_CTE if touch else "",
        limit="%(limit)s" if limit is None else str(int(limit)),
    )  # fmt: skip


@functools.lru_cache(maxsize=64)
def complete_shape(
    fields: tuple[str, ...] | None, events: EventMode, one: bool, gated: bool = False
) -> Shape:
    model_fields = _model_fields(fields)
    return _shape(
        COMPLETE_SQL, event_cte_sql("ev", COMPLETE_EVENTS, events), model_fields, events,
        returning=_returning(model_fields, COMPLETE_EVENT_COLUMNS),
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


@functools.lru_cache(maxsize=128)
def push_one_sql(present: tuple[int, ...], with_event: bool, notify: bool = False) -> str:
    """PUSH_ONE_SQL for the job columns at ``present`` (non-NULL values); ``notify``: it
    wakes the queue's workers on commit."""
    return PUSH_ONE_SQL.format(
        columns=", ".join(f'"{JOB_COLUMNS[i]}"' for i in present),
        values=", ".join(f"%({PUSH_ONE_PARAMS[i]})s" for i in present),
        events=PUSH_ONE_EVENT_CTE if with_event else "",
        tail=PUSH_ONE_NOTIFY_TAIL if notify else PUSH_ONE_TAIL,
    )


def _model_fields(fields: Sequence[str] | None) -> list[Any]:
    # Only the asked-for columns: building a full 45-field model per claimed row is most
    # of a worker's fetch cost. The other fields are deferred (loaded on access).
    if fields is None:
        return list(JOB_FIELDS)
    wanted = {"id", *fields}
    return [f for f in JOB_FIELDS if f.name in wanted]


def event_row(values: Sequence[Any]) -> EventRow:
    id_, type_, source, subject, time, job_id, queue, data = values
    if isinstance(data, str | bytes):  # Django loads jsonb as text; JSONField decodes it
        data = json.loads(data)
    return EventRow(id_, type_, source, subject, time, job_id, queue, data)


def json_text(value: Any) -> str:
    # Most jobs carry empty meta/tags/extra/errors: skip the encoder for those.
    if not value and isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value)


_JOB_ATTNAMES = tuple(f.attname for f in Job._meta.concrete_fields)


JOB_COLUMN_INDEXES = tuple(range(len(_JOB_ATTNAMES)))


_GET_VALUES = itemgetter(*_JOB_ATTNAMES)


def job_values(job: Job) -> list[Any]:
    # Plain attribute values, read in C: faster than getattr on the hot paths.
    values = list(_GET_VALUES(job.__dict__))
    for i in JSON_JOB_COLUMNS:
        if values[i] is not None:
            # JSON text, not a Jsonb wrapper: a str is formatted by psycopg's C code,
            # a wrapper calls a Python dumper per value (5 per row on the bulk path).
            values[i] = json_text(values[i])
    return values


def batch_params(jobs: Sequence[Job]) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The shape of :func:`push_batch_sql` for ``jobs`` and its parameters: per
    column, the values of a column that varies (the ids always do: they make the
    rows), the one value the batch shares, or nothing when every job leaves it NULL.
    JSON values go as JSON text (see :func:`job_values`)."""
    shape: list[int] = []
    params: dict[str, Any] = {}
    size = len(jobs)
    for i, column in enumerate(zip(*[_GET_VALUES(job.__dict__) for job in jobs], strict=True)):
        name = f"c{i}"
        if i in JSON_JOB_COLUMNS and column.count(None) != size:
            if column.count({}) == size or column.count([]) == size:  # most meta, tags...
                shape.append(_SHARED)
                params[name] = json_text(column[0])
                continue
            if column.count(column[0]) != size and None not in column:  # most args
                # One JSON array of the batch's values, which PostgreSQL takes apart:
                # one call of the encoder instead of one per job (1 µs each).
                shape.append(_JSON_ARRAY)
                params[name] = json.dumps(column)
                continue
            # Compared as JSON text: 1 == True == 1.0 in Python, not in JSON.
            column = tuple([None if v is None else json_text(v) for v in column])
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


def outcomes_sql(items: Sequence[Completion]) -> str:
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


def event_values(row: tuple[Any, ...]) -> list[Any]:
    values = list(row)
    values[-1] = Jsonb(values[-1], dumps=json_text)
    return values
