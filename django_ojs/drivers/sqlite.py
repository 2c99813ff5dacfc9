"""SQLite driver: compare-and-set claim inside the (immediate) transaction, and polling.

SQLite has no JSON containment operator: the job search's ``@>`` is
``ojs_json_contains(column, fragment)`` here, a function registered on every SQLite
connection (:func:`register_functions`) that runs :func:`contains` on each candidate row,
inside the query, so it sees every row.

SQLite has no ``SKIP LOCKED`` (Django silently ignores ``select_for_update`` there), but
it serialises writers: with ``transaction_mode = "IMMEDIATE"`` the claiming transaction
holds the write lock from its first statement, and each row is still claimed with a
conditional ``UPDATE … WHERE state = 'available'`` whose row count is checked. Everything
else is the portable ORM implementation (:mod:`django_ojs.drivers.orm`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.core.checks import CheckMessage, Warning
from django.db import connections
from django.db.models import BooleanField, F, Func, Q, QuerySet, Value

from django_ojs.drivers.base import EventMode, Written, job_rows
from django_ojs.drivers.orm import OrmDriver
from django_ojs.models import Job, Queue
from django_ojs.policy import Durations, effective, ms_delta


def _earliest(*values: datetime | None) -> datetime | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


class SQLiteDriver(OrmDriver):
    vendor = "sqlite"

    def json_contains(self, jobs: QuerySet[Job], column: str, fragment: Any) -> QuerySet[Job]:
        return jobs.filter(_JSONContains(F(column), Value(json.dumps(fragment))))

    def check_configuration(self) -> list[CheckMessage]:
        options = connections[self.using].settings_dict.get("OPTIONS", {})
        if str(options.get("transaction_mode", "")).upper() in ("IMMEDIATE", "EXCLUSIVE"):
            return []
        return [
            Warning(
                "SQLite without OPTIONS['transaction_mode'] = 'IMMEDIATE' can fail with "
                "'database is locked' when a worker and the web process write at once.",
                hint="Set DATABASES[...]['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
                "'timeout': 20, 'init_command': 'PRAGMA journal_mode=WAL;'}.",
                id="ojs.W001",
            )
        ]

    def claim(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None,  # full rows either way: SQLite reads them anyway
        events: EventMode,
        source: str,
        ids: Sequence[Any] | None = None,
        durable: bool = True,  # SQLite commits as its own synchronous pragma says
        tenants: Sequence[str] | None = None,
    ) -> Written:
        # Without ids: jobs free of limits, in queues free of limits; with ids: those jobs.
        gate = Q(paused=True) if ids is not None else Q(paused=True) | Q(limits__isnull=False)
        if Queue.objects.using(self.using).filter(gate, name=queue).exists():
            return Written()
        available = Job.objects.using(self.using).filter(state="available", queue=queue)
        if tenants is not None:
            available = available.filter(tenant__in=list(tenants)).exclude(tenant="")
        candidates = list(
            available.filter(Q(rate_key__isnull=True) if ids is None else Q(pk__in=list(ids)))
            .filter(Q(stale_at__isnull=True) | Q(stale_at__gt=now))
            .order_by("-priority", "vtime", "id")[:limit]
        )
        claimed = []
        for job in candidates:
            d = effective(job, visibility_ms=visibility_ms, defaults=defaults)
            changes = {
                "state": "active",
                "started_at": now,
                "worker_id": worker_id,
                "heartbeat_at": now,
                "visible_until": now + ms_delta(d.visibility_ms),
                "timeout_at": now + ms_delta(d.timeout_ms + d.grace_ms),
                "stalled_at": now + ms_delta(d.heartbeat_timeout_ms),
                # The enqueue TTL stops applying once an attempt has started.
                "stale_at": _earliest(job.expires_at, job.deadline_at),
            }
            # Compare-and-set: only a row still 'available' is ours.
            changed = (
                Job.objects.using(self.using)
                .filter(pk=job.pk, state="available")
                .update(attempt=F("attempt") + 1, **changes)
            )
            if changed:
                for name, value in changes.items():
                    setattr(job, name, value)
                job.attempt += 1
                claimed.append(job)
        rows = []
        if claimed and events is not EventMode.NONE:
            rows = job_rows(
                (
                    ("job.started", job, {"worker_id": worker_id, "attempt": job.attempt})
                    for job in claimed
                ),
                source,
                now,
            )
            if events.stored:
                self.insert_events(rows)
        return Written(claimed, rows if events.returned else [])

    def lock_keys(self, keys: Sequence[str]) -> None:
        # An IMMEDIATE transaction already holds SQLite's single write lock: pushes of the
        # same key (of any key) cannot interleave.
        return None

    def try_lock(self, name: str) -> bool:
        # An IMMEDIATE transaction already holds SQLite's single write lock.
        return True

    def listener(self, queues: list[str]) -> PollingListener:
        return PollingListener()


class PollingListener:
    """No notifications on SQLite: waiting is sleeping for the poll interval."""

    def __init__(self) -> None:
        self._woken = threading.Event()

    def wait(self, timeout: float) -> bool:
        self._woken.wait(timeout)
        self._woken.clear()
        return False

    def wake(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self._woken.set()


class _JSONContains(Func):
    """``ojs_json_contains(column, fragment)``: SQLite's stand-in for ``@>``."""

    function = "ojs_json_contains"
    output_field = BooleanField()


def _sqlite_contains(value: str | None, fragment: str) -> bool:
    if value is None:
        return False
    try:
        return contains(json.loads(value), json.loads(fragment))
    except (ValueError, RecursionError):
        return False


def register_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` receiver: ``ojs_json_contains`` on SQLite connections."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(
            "ojs_json_contains", 2, _sqlite_contains, deterministic=True
        )


def contains(value: Any, fragment: Any) -> bool:
    """PostgreSQL's ``jsonb @>`` in Python: objects by subset, arrays by any-element."""
    if isinstance(fragment, dict):
        return isinstance(value, dict) and all(
            k in value and contains(value[k], v) for k, v in fragment.items()
        )
    if isinstance(fragment, list):
        if not isinstance(value, list):
            return False
        return all(any(contains(item, want) for item in value) for want in fragment)
    return value == fragment and type(value) is type(fragment)
