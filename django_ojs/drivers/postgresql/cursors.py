"""Cursors that bind on the server and prepare hot statements, binary rows, pipelines.

Django's own cursors (client-side binding, never prepared) cost more than the round
trip on the hot paths; these are wrapped as Django wraps its own, so transactions, error
translation, ``execute_wrapper`` hooks and query logging behave the same.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.adapt import Loader

#: psycopg's own default: a statement is prepared on the server once it has run this many
#: times on a connection (its parse and plan are then reused; see :func:`server_cursor`).
PREPARE_THRESHOLD = 5


def server_cursor(connection: Any, *, binary: bool = False) -> Any:
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


def kept_cursor(connection: Any) -> Any:
    """:func:`server_cursor`, made once per connection and kept for its later calls (not to
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
    cursor = server_cursor(connection)
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


@contextlib.contextmanager
def pipelined(connection: Any) -> Iterator[None]:
    """Statements executed inside go to the server without waiting for their results,
    which are read (and their errors raised, as Django's) at the end of the block.
    Without pipeline support in the client library (libpq < 14), they run one by one."""
    if not psycopg.Pipeline.is_supported():
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield
