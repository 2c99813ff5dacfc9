"""The worker's wake-up: ``LISTEN`` on a connection of its own, ``NOTIFY`` on push.

``LISTEN`` cannot pass a pooler in transaction mode (PgBouncer's default for Django
sites): the server connection that listened goes back to the pool after the statement,
and the notifications it receives later have no client (PgBouncer logs "got packet 'A'
from server when not linked"). The listener therefore connects through the alias named
by ``OJS_LISTEN_DATABASE`` when there is one (straight to PostgreSQL), and checks that a
notification reaches it; when the alias looks pooled or the check fails, it says so once
and waits by polling.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg
from django.db import connections

from django_ojs import resilience
from django_ojs.conf import settings
from django_ojs.drivers.postgresql.statements import CHANNEL, LISTEN_SQL

logger = logging.getLogger("django_ojs.worker")

#: PgBouncer's default port.
PGBOUNCER_PORT = 6432
#: How long the listener waits for its own test notification (seconds).
PROBE_TIMEOUT = 5.0
#: The test notification's payload starts with this (not a queue name: ``:`` is not
#: allowed in one, so no listener takes it for work).
PROBE_PREFIX = "probe:"


def listen_alias(using: str) -> str:
    """The alias ``LISTEN`` connections of the job database ``using`` open: the one named
    by ``OJS_LISTEN_DATABASE`` for the job database (``OJS_DATABASE``), else ``using``."""
    other = settings.LISTEN_DATABASE
    return other if other and using == settings.DATABASE else using


def pooled_signs(settings_dict: Mapping[str, Any]) -> list[str]:
    """What in a ``DATABASES`` entry says its connections go through a transaction pooler.

    Django's and psycopg's documented settings for one: ``DISABLE_SERVER_SIDE_CURSORS``
    (server-side cursors cannot outlive a pooled transaction), ``OPTIONS`` with
    ``prepare_threshold`` set to None (no prepared statements: PgBouncer before 1.21),
    and PgBouncer's default port 6432.
    """
    signs = []
    if settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        signs.append("DISABLE_SERVER_SIDE_CURSORS is True")
    options = settings_dict.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        signs.append("OPTIONS['prepare_threshold'] is None")
    try:
        port = int(settings_dict.get("PORT") or 0)
    except (TypeError, ValueError):
        port = 0
    if port == PGBOUNCER_PORT:
        signs.append(f"PORT is {PGBOUNCER_PORT}")
    return signs


def connection_params(alias: str) -> dict[str, Any]:
    """psycopg keyword arguments for a connection of our own to ``alias``'s database."""
    params = connections[alias].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


class PostgreSQLListener:
    """A dedicated autocommit connection that ``LISTEN``s for pushes to some queues.

    When the connection is lost (a server restart, ``pg_terminate_backend``), ``wait``
    opens a new one and ``LISTEN``s again, then returns True once: a push notified while
    nobody listened is lost, so the caller should look for work. While the server is
    away, each ``wait`` tries once and then sleeps a back-off delay (at most its timeout).

    It listens through :func:`listen_alias`. When that alias looks pooled
    (:func:`pooled_signs`), or a test notification sent from another connection does not
    reach the new ``LISTEN`` within ``PROBE_TIMEOUT``, it logs one warning and
    :attr:`polling` is True: ``wait`` sleeps its timeout (or until :meth:`wake`).
    """

    def __init__(self, using: str, queues: list[str]):
        self.alias = listen_alias(using)
        self._params = connection_params(self.alias)
        self._queues = set(queues)
        self._lock = threading.Lock()
        self._closed = False
        #: Set by wake() and close(): ends a back-off sleep while disconnected.
        self._woken = threading.Event()
        self._outage = resilience.Outage("listener", logger)
        #: True when notifications cannot reach us: waiting is polling.
        self.polling = False
        signs = pooled_signs(connections[self.alias].settings_dict)
        if signs:
            self._poll_instead(f"it looks pooled ({', '.join(signs)})")
            self._conn: psycopg.Connection[Any] | None = None
            return
        self._conn = self._connect()
        if not self._probe(self._conn):
            self._conn.close()
            self._conn = None
            self._poll_instead(
                f"a test notification did not arrive within {PROBE_TIMEOUT:g}s (a pooler in "
                "transaction mode?)"
            )

    def _poll_instead(self, why: str) -> None:
        self.polling = True
        hint = (
            "check that OJS_LISTEN_DATABASE connects straight to PostgreSQL"
            if settings.LISTEN_DATABASE
            else "name an alias that connects straight to PostgreSQL in OJS_LISTEN_DATABASE"
        )
        logger.warning(
            "LISTEN on database alias %r cannot receive notifications: %s; waiting for "
            "work by polling instead (%s)",
            self.alias,
            why,
            hint,
        )

    def _probe(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a notification sent from another connection reaches ``conn``."""
        payload = PROBE_PREFIX + uuid.uuid4().hex
        with psycopg.connect(**self._params, autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, %s)", [CHANNEL, payload])
        return any(note.payload == payload for note in conn.notifies(timeout=PROBE_TIMEOUT))

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
        if self.polling:
            self._woken.wait(timeout)
            self._woken.clear()
            return False
        conn = self._conn
        if conn is None:
            return self._reconnect(timeout)
        try:
            for note in conn.notifies(timeout=timeout, stop_after=1):
                # An empty payload is wake(): return without claiming to have work.
                payload = note.payload
                if not payload or payload.startswith(PROBE_PREFIX):
                    return False
                return not self._queues or payload in self._queues
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
