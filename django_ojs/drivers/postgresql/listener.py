"""The worker's wake-up: ``LISTEN`` on a connection of its own, ``NOTIFY`` on push."""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg
from django.db import connections

from django_ojs import resilience
from django_ojs.drivers.postgresql.statements import CHANNEL, LISTEN_SQL

logger = logging.getLogger("django_ojs.worker")


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
