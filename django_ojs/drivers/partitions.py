"""The optional time-partitioned layout of ``ojs_job`` and ``ojs_event`` (PostgreSQL).

A partitioned table is a set of tables, one per day, week or month, plus a default one
for rows outside every range. Pruning a whole period is then ``DROP TABLE`` of its
partition: no row-by-row ``DELETE``, no dead tuples for vacuum, no index bloat.

* ``ojs_job`` is partitioned by RANGE of ``id``. Job ids are UUIDv7: their first 48
  bits are the creation time in milliseconds, so a range of ids is a range of creation
  times, and the primary key stays ``(id)``: an id is unique across partitions.
* ``ojs_event`` is partitioned by RANGE of ``time``. PostgreSQL requires the partition
  key in every unique constraint, so its keys become ``(seq, time)`` and ``(id, time)``;
  ``seq`` comes from one identity sequence and event ids are UUIDv7, as before.

The parent table's comment records the interval (``django_ojs partitions: day``): the
layout describes itself, no setting has to agree with the database. Partitions are
named ``<table>_p<YYYYMMDD>`` after the first day they hold, and ``<table>_default``.

Why raw SQL: partitions are DDL, which the ORM does not model.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from django_ojs.drivers.periods import INTERVALS, Partition, Partitions, next_start
from django_ojs.ids import uuid7_floor, uuid7_time

#: The partitioned tables and their partition keys.
KEYS = {"ojs_job": "id", "ojs_event": "time"}
#: Their primary keys (as Django knows them).
PKS = {"ojs_job": "id", "ojs_event": "seq"}
COMMENT = "django_ojs partitions: {interval}"
_COMMENT_RE = re.compile(rf"^django_ojs partitions: ({'|'.join(INTERVALS)})$")
_BOUNDS_RE = re.compile(r"FROM \('([^']*)'\) TO \('([^']*)'\)")

LAYOUT_SQL = """
SELECT c.relkind, obj_description(c.oid, 'pg_class')
FROM pg_class AS c
WHERE c.oid = to_regclass(%s)
"""
CHILDREN_SQL = """
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = %s::regclass
"""
# What the copy of a table must get back once the original is dropped: its indexes
# (those that do not back a constraint), its constraints and its grants, by name.
INDEXES_SQL = """
SELECT pg_get_indexdef(i.indexrelid)
FROM pg_index AS i
WHERE i.indrelid = %s::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint AS k WHERE k.conindid = i.indexrelid)
ORDER BY i.indexrelid
"""
CONSTRAINTS_SQL = """
SELECT conname, contype, pg_get_constraintdef(oid)
FROM pg_constraint
WHERE conrelid = %s::regclass AND contype IN ('p', 'u', 'c', 'f', 'x')
ORDER BY contype = 'f', oid
"""
GRANTS_SQL = """
SELECT a.privilege_type, CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                              ELSE quote_ident(pg_get_userbyid(a.grantee)) END
FROM pg_class AS c, aclexplode(c.relacl) AS a
WHERE c.oid = %s::regclass AND a.grantee <> c.relowner
"""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _bound(table: str, moment: datetime) -> str:
    return str(uuid7_floor(moment)) if KEYS[table] == "id" else moment.isoformat()


def _parse_bound(table: str, text: str) -> datetime:
    if KEYS[table] == "id":
        return uuid7_time(uuid.UUID(text))
    return datetime.fromisoformat(text).astimezone(UTC)


def layout(cursor: Any, table: str) -> Partitions | None:
    """``table``'s partitions, oldest first; None when it is a plain table."""
    cursor.execute(LAYOUT_SQL, [table])
    found = cursor.fetchone()
    if found is None or found[0] != "p":
        return None
    match = _COMMENT_RE.match(found[1] or "")
    if match is None:  # partitioned by someone else: not ours to maintain
        return None
    cursor.execute(CHILDREN_SQL, [table])
    ranges, default = [], None
    for name, bound in cursor.fetchall():
        if bound == "DEFAULT":
            default = Partition(table, name, None, None)
            continue
        bounds = _BOUNDS_RE.search(bound)
        if bounds is None:
            continue
        start, end = (_parse_bound(table, b) for b in bounds.groups())
        ranges.append(Partition(table, name, start, end))
    ranges.sort(key=lambda p: p.start or datetime.min.replace(tzinfo=UTC))
    return Partitions(table, match.group(1), ranges, default)


def create(
    cursor: Any, table: str, start: datetime, end: datetime, *, timeout: float | None = None
) -> Partition:
    """Add the partition ``[start, end)`` to ``table``.

    Rows of that range already in the default partition (a client's id from another
    time, a period created late) move into the new one in the same transaction:
    PostgreSQL refuses a new range that the default partition still holds rows of.
    """
    if timeout is not None:
        _lock_timeout(cursor, timeout)
    key = _ident(KEYS[table])
    name = f"{table}_p{start:%Y%m%d}"
    lo, hi = _bound(table, start), _bound(table, end)
    default = f"{table}_default"
    # The lock CREATE … PARTITION OF takes anyway, taken before looking in the default
    # partition, so that no row of the range can arrive there in between.
    cursor.execute(f"LOCK TABLE {_ident(table)} IN ACCESS EXCLUSIVE MODE")
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {_ident(default)} WHERE {key} >= %s AND {key} < %s)",
        [lo, hi],
    )
    moving = bool(cursor.fetchone()[0])
    if moving:
        cursor.execute(f"ALTER TABLE {_ident(table)} DETACH PARTITION {_ident(default)}")
    # DDL takes no parameters; both bounds are formatted here (a UUID, an ISO time).
    # IF NOT EXISTS: another reaper may have made this period since the caller looked.
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {_ident(name)} PARTITION OF {_ident(table)} "
        f"FOR VALUES FROM ('{lo}') TO ('{hi}')"
    )
    _copy_statistics(cursor, table, name)
    if moving:
        cursor.execute(
            f"WITH moved AS (DELETE FROM {_ident(default)} WHERE {key} >= %s AND {key} < %s "
            f"RETURNING *) INSERT INTO {_ident(table)} SELECT * FROM moved",
            [lo, hi],
        )
        cursor.execute(f"ALTER TABLE {_ident(table)} ATTACH PARTITION {_ident(default)} DEFAULT")
    return Partition(table, name, start, end)


# Per-column statistics targets (``ALTER COLUMN … SET STATISTICS``, migration 0002_postgresql sets
# some to 0): neither ``LIKE`` nor ``PARTITION OF`` copies them, and autovacuum analyses
# each partition with its own. NULL (PostgreSQL 17+) or -1 (before) is the default.
STATISTICS_SQL = """
SELECT a.attname, a.attstattarget FROM pg_attribute AS a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
  AND a.attstattarget >= 0
ORDER BY a.attnum
"""


def _copy_statistics(cursor: Any, source: str, target: str) -> None:
    """Give ``target``'s columns ``source``'s statistics targets."""
    cursor.execute(STATISTICS_SQL, [source])
    targets = cursor.fetchall()
    if targets:
        alters = ", ".join(f"ALTER COLUMN {_ident(c)} SET STATISTICS {int(n)}" for c, n in targets)
        cursor.execute(f"ALTER TABLE ONLY {_ident(target)} {alters}")


def convert(cursor: Any, table: str, interval: str, start: datetime, end: datetime) -> None:
    """Turn the plain ``table`` into a partitioned one, with periods from ``start`` to ``end``.

    Runs in the caller's transaction, holding ``ACCESS EXCLUSIVE`` on the table
    throughout: every row is copied into the new partitions, so on a large table this
    is downtime for pushes and claims (see the partitioning guide).
    """
    _rebuild(cursor, table, (interval, start, end))


def revert(cursor: Any, table: str) -> None:
    """Turn the partitioned ``table`` back into a plain one (every row copied, as above)."""
    _rebuild(cursor, table, None)


def _rebuild(cursor: Any, table: str, periods: tuple[str, datetime, datetime] | None) -> None:
    """Copy ``table`` into a new one, partitioned over ``periods`` (interval, start, end)
    or plain, that takes its name, indexes, constraints and grants."""
    key = KEYS[table]
    old = f"{table}__old"
    cursor.execute(f"LOCK TABLE {_ident(table)} IN ACCESS EXCLUSIVE MODE")
    cursor.execute(INDEXES_SQL, [table])
    indexes = [row[0] for row in cursor.fetchall()]
    cursor.execute(CONSTRAINTS_SQL, [table])
    constraints = cursor.fetchall()
    cursor.execute(GRANTS_SQL, [table])
    grants = cursor.fetchall()
    cursor.execute(f"ALTER TABLE {_ident(table)} RENAME TO {_ident(old)}")
    cursor.execute(
        f"CREATE TABLE {_ident(table)} (LIKE {_ident(old)} INCLUDING DEFAULTS "
        f"INCLUDING IDENTITY INCLUDING GENERATED INCLUDING STORAGE)"
        + (f" PARTITION BY RANGE ({_ident(key)})" if periods else "")
    )
    _copy_statistics(cursor, old, table)
    if periods:
        interval, period, end = periods
        cursor.execute(
            f"CREATE TABLE {_ident(table + '_default')} PARTITION OF {_ident(table)} DEFAULT"
        )
        _copy_statistics(cursor, table, table + "_default")
        while period < end:
            following = next_start(period, interval)
            create(cursor, table, period, following)
            period = following
    cursor.execute(f"INSERT INTO {_ident(table)} SELECT * FROM {_ident(old)}")
    cursor.execute(
        "SELECT a.attname, pg_get_serial_sequence(%s, a.attname) FROM pg_attribute AS a "
        "WHERE a.attrelid = %s::regclass AND a.attidentity <> ''",
        [table, table],
    )
    sequences = cursor.fetchall()
    # Checks of deferred foreign keys still due on the original would forbid its drop:
    # run them now, then defer again (as Django's own check_constraints does).
    cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    cursor.execute(f"DROP TABLE {_ident(old)}")
    for name, kind, definition in constraints:
        if kind in ("p", "u"):
            definition = _unique_columns(definition, key, partitioned=periods is not None)
        cursor.execute(f"ALTER TABLE {_ident(table)} ADD CONSTRAINT {_ident(name)} {definition}")
    for definition in indexes:  # a partitioned table's own index is shown "ON ONLY"
        cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
    for column, sequence in sequences:  # the copy's identity starts after the copied rows
        cursor.execute(
            f"SELECT setval(%s, COALESCE((SELECT max({_ident(column)}) FROM {_ident(table)}), 0)"
            " + 1, false)",
            [sequence],
        )
        wanted = f"{table}_{column}_seq"  # the name it had: the original's is dropped now
        if sequence.rsplit(".", 1)[-1] != wanted:
            cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO {_ident(wanted)}")
    for privilege, grantee in grants:
        cursor.execute(f"GRANT {privilege} ON {_ident(table)} TO {grantee}")
    if periods:
        cursor.execute(
            f"COMMENT ON TABLE {_ident(table)} IS '{COMMENT.format(interval=periods[0])}'"
        )


def _unique_columns(definition: str, key: str, *, partitioned: bool) -> str:
    """A primary key or unique constraint with the partition ``key`` added (PostgreSQL
    requires it on a partitioned table) or, going back, without the one added then."""
    head, columns = definition.split("(", 1)
    names = [c.strip() for c in columns[: columns.rindex(")")].split(",")]
    spelled = {key, _ident(key)}
    if partitioned and not spelled & set(names):
        names.append(_ident(key))
    elif not partitioned and len(names) > 1 and names[-1] in spelled:
        names.pop()
    return f"{head}({', '.join(names)})"


def _lock_timeout(cursor: Any, timeout: float) -> None:
    cursor.execute("SELECT set_config('lock_timeout', %s, true)", [f"{int(timeout * 1000)}ms"])


def lock(cursor: Any, partition: Partition, *, timeout: float) -> bool:
    """Take the lock that dropping ``partition`` needs (``ACCESS EXCLUSIVE`` on its parent
    table), waiting at most ``timeout`` seconds: nothing reads or writes the table until
    the transaction ends, so what is checked next stays true until the drop. False when
    the partition is gone by then (another reaper dropped it first).

    A lock not had in time raises (the caller tries again at its next pass): pushes and
    claims queue behind a waiting lock, so the wait must stay short.
    """
    _lock_timeout(cursor, timeout)
    cursor.execute(f"LOCK TABLE {_ident(partition.table)} IN ACCESS EXCLUSIVE MODE")
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [partition.name])
    return bool(cursor.fetchone()[0])


def drop(cursor: Any, partition: Partition, *, keep: list[Any]) -> None:
    """Drop ``partition`` with its rows (after :func:`lock`), except the rows of primary
    keys ``keep``, which move to the default partition first (detached, the period's
    range belongs to no partition: its rows go to the default one)."""
    if keep:
        table, name = _ident(partition.table), _ident(partition.name)
        cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
        cursor.execute(
            f"INSERT INTO {table} SELECT * FROM {name} WHERE {_ident(PKS[partition.table])} "
            f"= ANY(%s)",
            [keep],
        )
    cursor.execute(f"DROP TABLE {_ident(partition.name)}")
