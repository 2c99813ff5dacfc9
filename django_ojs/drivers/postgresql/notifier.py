"""The pushers' side of the wake-up: ``NOTIFY`` after commit, from a thread of its own.

A ``NOTIFY`` sent inside the pushing transaction makes PostgreSQL take one lock for the
whole database at commit and hold it until the commit is flushed to disk: every pushing
transaction of every process then commits one after the other, and the flushes cannot be
grouped. Measured with ``pgbench`` on the project's machine (16 clients, one INSERT per
transaction): 16,900 transactions/s, 6,200 with a ``pg_notify`` in each; over HTTP an
enqueue went from 0.45 to 0.73 of a plain Django INSERT view in the same run without it.

So a push commits without notifying, and then hands the names of the queues that
received available jobs to this process's :class:`Notifier`, which sends them from a
connection of its own, in one statement whose transaction commits without waiting for
the disk (``synchronous_commit`` off for that transaction only: a notification is not
kept across a crash anyway). Queues named while a ``NOTIFY`` is on its way go in the next
one, so a process pushing a thousand jobs a second to one queue sends far fewer than a
thousand, and none is ever dropped in favour of a timer: a listener hears of every
commit after it, within one round trip.

A wake-up lost to a connection error is covered by what already covers a lost
notification: the workers' poll interval (``OJS_WORKER_POLL_INTERVAL``), and their look
for work whenever their own ``LISTEN`` connection comes back.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.signals import connection_created

from django_ojs import resilience
from django_ojs.drivers.postgresql.listener import connection_params
from django_ojs.drivers.postgresql.statements import NOTIFY_SQL

logger = logging.getLogger("django_ojs.worker")

#: The notifier's connection in ``pg_stat_activity`` (unless OPTIONS name one).
APPLICATION_NAME = "django-ojs notifier"
#: How long the interpreter's exit waits for wake-ups still to be sent (seconds).
EXIT_FLUSH_SECONDS = 2.0
#: A notifier with nothing to send for this long closes its connection (seconds).
IDLE_SECONDS = 10.0
#: The least time between two ``NOTIFY`` of one process (seconds): a wake-up is sent at
#: once after a quiet moment, else with the others of the next 5 ms. With 1 ms, a web
#: process enqueueing 550 jobs/s sent nearly one ``NOTIFY`` per job, and over HTTP on a
#: quiet machine the enqueue reached 0.55-0.60 of the plain INSERT view against 0.63-0.68
#: with the ``NOTIFY`` in each push; with 5 ms, 0.62-0.63 against 0.60-0.63.
INTERVAL_SECONDS = 0.005


class Notifier:
    """Sends ``NOTIFY`` for queues named by :meth:`wake`, coalesced, from its own thread."""

    def __init__(self, alias: str):
        self.alias = alias
        params = connection_params(alias)
        # Named in pg_stat_activity, unless the project names its connections itself.
        params.setdefault("application_name", APPLICATION_NAME)
        self._params = params
        self._cond = threading.Condition()
        self._pending: set[str] = set()
        self._sending = False
        #: True while the thread waits out INTERVAL_SECONDS: wake() need not signal it.
        self._holding = False
        self._last_sent = 0.0
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._outage = resilience.Outage(f"notifier ({alias})", logger)

    def wake(self, queues: Iterable[str]) -> None:
        """Have the workers of ``queues`` woken: call after the push committed. Never raises."""
        with self._cond:
            self._pending.update(queues)
            if not self._pending:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"ojs-notifier-{self.alias}", daemon=True
                )
                self._thread.start()
            elif not self._holding and not self._sending:
                self._cond.notify()  # else the thread looks at _pending before it waits

    def flush(self, timeout: float) -> bool:
        """Wait until every queue named so far was sent (or failed); False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._pending and not self._sending, timeout=timeout
            )

    def release(self) -> None:
        """Close the connection once nothing is on its way (the next wake-up opens one)."""
        with self._cond:
            idle = self._cond.wait_for(
                lambda: not self._pending and not self._sending, timeout=EXIT_FLUSH_SECONDS
            )
            if idle:  # else the thread is using it: it closes it itself when idle
                self._close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._sending = False
                self._cond.notify_all()  # flush() waits for an idle notifier
                if not self._cond.wait_for(lambda: self._pending, timeout=IDLE_SECONDS):
                    self._close()  # idle: give the connection back
                    self._cond.wait_for(lambda: self._pending)
                self._holding = True
                while (left := self._last_sent + INTERVAL_SECONDS - time.monotonic()) > 0:
                    self._cond.wait(left)
                self._holding = False
                queues = sorted(self._pending)
                self._pending.clear()
                self._sending = True
            self._send(queues)
            self._last_sent = time.monotonic()

    def _send(self, queues: list[str]) -> None:
        # A connection that was idle may have been ended meanwhile (a server restart, an
        # idle timeout): one more try on a new one before the wake-up is given up.
        for attempt in (1, 2):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(**self._params, autocommit=True)
                self._conn.execute(NOTIFY_SQL, [queues])
            except psycopg.Error as exc:
                self._close()
                if attempt == 2:
                    # Given up: the workers' polling covers it (see the module's docstring);
                    # retrying against a server that is away would only wait.
                    self._outage.failed(exc)
            else:
                self._outage.succeeded()
                return

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):  # closing a dead connection
                conn.close()


class Pushes:
    """How many single-statement pushes of this process are under way."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """No push under way, and a new lock (a forked child's start)."""
        self._lock = threading.Lock()
        self._count = 0

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Count a push while it runs; True when no other push of the process runs."""
        with self._lock:
            self._count += 1
            alone = self._count == 1
        try:
            yield alone
        finally:
            with self._lock:
                self._count -= 1


pushes = Pushes()
_notifiers: dict[str, Notifier] = {}
_lock = threading.Lock()


def notifier(alias: str) -> Notifier:
    """This process's notifier for the database ``alias`` (made on first use)."""
    try:
        return _notifiers[alias]
    except KeyError:
        with _lock:
            if alias not in _notifiers:
                _notifiers[alias] = Notifier(alias)
            return _notifiers[alias]


def _forget_after_fork() -> None:
    # A child has none of its parent's threads, and must not share its connections.
    # Reset in place: the driver holds ``pushes`` by name, and a lock another thread held
    # at the fork would stay held in the child.
    global _lock
    _notifiers.clear()
    _lock = threading.Lock()
    pushes.reset()


def release_all() -> None:
    """Close every notifier's connection of this process (each reopens when next used)."""
    for each in list(_notifiers.values()):
        each.release()


def _release_before_dropping(sender: Any, connection: Any, **kwargs: Any) -> None:
    # Django connects to the server without a database (its alias NO_DB_ALIAS) to create
    # or drop a test database, which PostgreSQL refuses while another session is in it.
    if connection.alias == NO_DB_ALIAS and _notifiers:
        release_all()


def _flush_at_exit() -> None:
    # A script that enqueues and exits must still wake the workers.
    for each in list(_notifiers.values()):
        each.flush(EXIT_FLUSH_SECONDS)


connection_created.connect(_release_before_dropping, dispatch_uid="ojs-notifier-release")
os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_flush_at_exit)
