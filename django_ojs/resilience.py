"""Surviving a lost database connection: which errors count, back-off, and the log lines.

The worker's loops (fetcher, listener, heartbeat, outcome writer) and the reaper all
talk to the database for as long as the process lives. When the server restarts, or a
connection is killed, each of them sees a connection error on its next call. They all
handle it the same way, through this module:

* :func:`is_connection_error` says which errors mean "the database is unavailable"
  (Django's and psycopg's ``OperationalError`` and ``InterfaceError``): such a call is
  retried, anything else is a bug and is raised as before.
* :class:`Outage` is one loop's view of the database. ``failed(exc)`` closes that loop's
  broken Django connection, logs ``database unavailable, retrying`` at WARNING once per
  outage, and returns how long to wait: capped exponential back-off with jitter
  (:class:`Backoff`, 0.1 s doubling up to 5 s). ``succeeded()`` logs
  ``database available again`` at INFO once, when an outage ends.
* :func:`retry` calls a function until it stops failing with a connection error.

Nothing here writes job state: a retried write is still a ``lifecycle`` call.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from django_ojs.conf import settings

T = TypeVar("T")

#: The first delay after a failure and the longest one (seconds).
FIRST_DELAY = 0.1
MAX_DELAY = 5.0


def _connection_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [OperationalError, InterfaceError]
    try:
        import psycopg
    except ImportError:  # pragma: no cover - SQLite-only installs
        pass
    else:
        # Raised by connections used directly (the PostgreSQL listener), not through Django.
        errors += [psycopg.OperationalError, psycopg.InterfaceError]
    return tuple(errors)


CONNECTION_ERRORS: tuple[type[Exception], ...] = _connection_errors()
_CLOSE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, *CONNECTION_ERRORS)


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the database is (for now) unreachable: retry, don't crash.

    Django raises ``InterfaceError`` for a connection that is already closed, and
    ``OperationalError`` for one the server ended (restart, ``pg_terminate_backend``) or
    could not open. SQLite's "database is locked" is an ``OperationalError`` too, and
    retrying is right for it as well.
    """
    return isinstance(exc, CONNECTION_ERRORS)


class Backoff:
    """Capped exponential back-off with jitter: each delay is between half and all of
    ``first * 2**n`` (at most ``cap``), so that many processes that lost the database
    at the same moment do not all come back at the same moment."""

    def __init__(
        self,
        first: float = FIRST_DELAY,
        cap: float = MAX_DELAY,
        rand: Callable[[], float] = random.random,
    ):
        self.first = first
        self.cap = cap
        self.rand = rand
        self.failures = 0

    def next(self) -> float:
        """The delay before the next try; each call counts one more failure."""
        ceiling = min(self.cap, self.first * 2.0 ** min(self.failures, 32))
        self.failures += 1
        return ceiling / 2 + self.rand() * ceiling / 2

    def reset(self) -> None:
        self.failures = 0


class Outage:
    """One loop's view of the database: logs once when it goes away and once when it is
    back, and hands out back-off delays in between.

    ``name`` says which loop in the log lines (``"fetcher"``, ``"heartbeat"``…); ``using``
    is the database alias whose Django connection is closed on each failure (in the
    calling thread: Django connections are per thread). Threads may share one.
    """

    def __init__(
        self,
        name: str,
        logger: logging.Logger,
        *,
        using: str | None = None,
        backoff: Backoff | None = None,
    ):
        self.name = name
        self.logger = logger
        self.using = using
        self.backoff = backoff or Backoff()
        self.since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        """Whether the last call failed with a connection error."""
        return self.since is not None

    def failed(self, exc: BaseException) -> float:
        """Record a connection error; returns the seconds to wait before trying again."""
        if self.using is not None:
            close_connection(self.using)
        with self._lock:
            if self.since is None:
                self.since = time.monotonic()
                detail = str(exc).strip().splitlines()
                self.logger.warning(
                    "%s: database unavailable, retrying (%s: %s)",
                    self.name,
                    type(exc).__name__,
                    detail[0] if detail else "",
                )
            return self.backoff.next()

    def succeeded(self) -> None:
        """Record a call that worked; ends the outage (and says so) if there was one."""
        if self.since is None:
            return  # the usual case: nothing to do, no lock taken
        with self._lock:
            if self.since is not None:
                self.logger.info(
                    "%s: database available again after %.1fs (%d failed tries)",
                    self.name,
                    time.monotonic() - self.since,
                    self.backoff.failures,
                )
                self.since = None
            self.backoff.reset()


def drop_broken_connection(using: str | None) -> None:
    """Between two units of work of a long-lived worker thread (the outcome writer, the
    reaper): close this thread's connection to ``using`` (``None``: the job database,
    ``OJS_DATABASE``) if it is broken or past a
    non-zero ``CONN_MAX_AGE``, else keep it.

    Django's ``close_old_connections`` also closes every connection when
    ``CONN_MAX_AGE`` is 0 (its default): right for requests, but in a worker it meant a new
    connection, about 2 ms of work for both sides, before every batch written.
    """
    connection = connections[using or settings.DATABASE]
    if connection.connection is None:
        return
    if not connection.settings_dict.get("CONN_MAX_AGE"):
        connection.close_at = None  # 0: kept for the thread's life; None already is
    connection.close_if_unusable_or_obsolete()


def close_connection(using: str) -> None:
    """Drop this thread's Django connection to ``using``; the next query opens a new one."""
    # Closing a connection the server already ended can fail; it is closed anyway.
    with contextlib.suppress(*_CLOSE_ERRORS):
        connections[using].close()


def retry(
    call: Callable[[], T],
    outage: Outage,
    *,
    stop: threading.Event | None = None,
    give_up_after: float | None = None,
) -> T:
    """``call()`` until it does not fail with a connection error; returns its result.

    Waits with ``outage``'s back-off between tries. Other exceptions propagate at once.
    The last connection error propagates too when ``stop`` is set or once
    ``give_up_after`` seconds have passed since the first failure; otherwise it retries
    for as long as the database is away.
    """
    started: float | None = None
    while True:
        try:
            result = call()
        except CONNECTION_ERRORS as exc:
            delay = outage.failed(exc)
            now = time.monotonic()
            started = now if started is None else started
            if (stop is not None and stop.is_set()) or (
                give_up_after is not None and now - started >= give_up_after
            ):
                raise
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
            continue
        outage.succeeded()
        return result
