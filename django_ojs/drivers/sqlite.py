"""SQLite driver: compare-and-set claim inside the (immediate) transaction, and polling.

SQLite has no ``SKIP LOCKED`` (Django silently ignores ``select_for_update`` there), but
it serialises writers: with ``transaction_mode = "IMMEDIATE"`` the claiming transaction
holds the write lock from its first statement, and each row is still claimed with a
conditional ``UPDATE … WHERE state = 'available'`` whose row count is checked.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q

from django_ojs.models import Event, Job, Queue
from django_ojs.policy import Durations


def _ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def _earliest(*values: datetime | None) -> datetime | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


class SQLiteDriver:
    vendor = "sqlite"

    def __init__(self, using: str):
        self.using = using

    def claim(
        self,
        queue: str,
        limit: int,
        *,
        worker_id: str | None,
        now: datetime,
        visibility_ms: int | None,
        defaults: Durations,
        fields: Sequence[str] | None = None,  # full rows either way: SQLite reads them anyway
        event_source: str | None = None,  # never given: claim_writes_events is False
    ) -> list[Job]:
        if Queue.objects.using(self.using).filter(name=queue, paused=True).exists():
            return []
        candidates = list(
            Job.objects.using(self.using)
            .filter(state="available", queue=queue)
            .filter(Q(stale_at__isnull=True) | Q(stale_at__gt=now))
            .order_by("-priority", "id")[:limit]
        )
        claimed = []
        for job in candidates:
            vis = visibility_ms if visibility_ms is not None else job.visibility_timeout_ms
            vis = vis if vis is not None else defaults.visibility_ms
            timeout = job.timeout_ms if job.timeout_ms is not None else defaults.timeout_ms
            grace = job.grace_period_ms if job.grace_period_ms is not None else defaults.grace_ms
            hb = job.heartbeat_timeout_ms
            hb = hb if hb is not None else defaults.heartbeat_timeout_ms
            fields = {
                "state": "active",
                "started_at": now,
                "worker_id": worker_id,
                "heartbeat_at": now,
                "visible_until": now + _ms(vis),
                "timeout_at": now + _ms(timeout + grace),
                "stalled_at": now + _ms(hb),
                # The enqueue TTL stops applying once an attempt has started.
                "stale_at": _earliest(job.expires_at, job.deadline_at),
            }
            # Compare-and-set: only a row still 'available' is ours.
            changed = (
                Job.objects.using(self.using)
                .filter(pk=job.pk, state="available")
                .update(attempt=F("attempt") + 1, **fields)
            )
            if changed:
                for name, value in fields.items():
                    setattr(job, name, value)
                job.attempt += 1
                claimed.append(job)
        return claimed

    single_statement_push = False

    def push(self, jobs: list[Job], events: list[tuple[Any, ...]], available: set[str]) -> None:
        if len(jobs) == 1:
            jobs[0].save(using=self.using, force_insert=True)
        else:
            Job.objects.using(self.using).bulk_create(jobs, batch_size=500)
        self.insert_events(events)
        self.after_push({job.queue for job in jobs}, available)

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            Event.objects.using(self.using).bulk_create(
                [Event(*(None, *row)) for row in rows], batch_size=500
            )

    def after_push(self, queues: set[str], available: set[str]) -> None:
        Queue.objects.using(self.using).bulk_create(
            [Queue(name=name) for name in sorted(queues)], ignore_conflicts=True
        )

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
