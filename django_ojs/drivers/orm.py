"""Portable implementations of the engine contract, written with the Django ORM.

The SQLite driver is these plus its claim, lock and listener; the PostgreSQL driver
replaces the hot paths with single statements and keeps the rest. No vendor branches.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, Count, Exists, JSONField, Q, QuerySet, Value, When
from django.utils import timezone

from django_ojs.drivers.base import (
    Completion,
    Driver,
    EventMode,
    EventRow,
    Written,
    enqueue_event,
    job_rows,
    pushed_queues,
)
from django_ojs.models import Event, Job, Queue, Tenant, Worker
from django_ojs.policy import elapsed_ms
from django_ojs.states import RELEASED_FIELDS, TERMINAL_STATES, JobState
from django_ojs.validation import split_patterns

RELEASED: dict[str, Any] = dict.fromkeys(RELEASED_FIELDS)


class OrmDriver(Driver):
    """The ORM half of a driver; subclasses add ``claim``, ``lock_keys``, ``try_lock`` and ``listener``."""

    def promote_due(
        self, *, now: datetime, queues: Sequence[str] | None, wait: bool, limit: int
    ) -> list[Job]:
        due = Job.objects.using(self.using).due(now)
        if queues is not None:
            due = due.filter(queue__in=list(queues))
        jobs = self.lock_rows(due.order_by("id"), limit=limit, skip_locked=not wait)
        if not jobs:
            return []
        Job.objects.using(self.using).filter(id__in=[j.id for j in jobs]).due(now).update(
            state="available", enqueued_at=now, next_attempt_at=None
        )
        for job in jobs:
            job.previous_state = job.state
            job.state = "available"
            job.enqueued_at = now
            job.next_attempt_at = None
        return jobs

    def touch_worker(self, worker_id: str, queues: list[str], now: datetime) -> None:
        # One upsert: create the worker on first contact, else refresh its sign of life.
        Worker.objects.using(self.using).bulk_create(
            [Worker(id=worker_id, queues=queues, started_at=now, last_heartbeat_at=now)],
            update_conflicts=True,
            unique_fields=["id"],
            update_fields=["last_heartbeat_at"],
        )

    def record_beat(self, worker_id: str, fields: Mapping[str, Any]) -> str | None:
        workers = Worker.objects.using(self.using).filter(id=worker_id)
        if not workers.update(**fields):
            return None
        return workers.values_list("directive", flat=True).first() or ""

    def limited_candidates(self, queue: str, now: datetime, limit: int) -> list[tuple[Any, ...]]:
        limited_queue = Queue.objects.using(self.using).filter(name=queue, limits__isnull=False)
        return list(
            Job.objects.using(self.using)
            .filter(state=JobState.AVAILABLE, queue=queue)
            .filter(Q(rate_key__isnull=False) | Q(Exists(limited_queue)))
            .filter(Q(stale_at__isnull=True) | Q(stale_at__gt=now))
            .order_by("-priority", "vtime", "id")
            .values_list("id", "rate_key", "rate_limit", "tenant")[:limit]
        )

    def capped_candidates(
        self,
        queue: str,
        now: datetime,
        limit: int,
        *,
        window: int,
        caps: Mapping[str, int],
        tenants: Sequence[str] | None,
    ) -> list[tuple[Any, str]]:
        active = dict(
            Job.objects.using(self.using)
            .filter(state=JobState.ACTIVE, tenant__in=list(caps))
            .exclude(tenant="")
            .order_by()
            .values("tenant")
            .annotate(n=Count("id"))
            .values_list("tenant", "n")
        )
        held = {tenant for tenant, cap in caps.items() if active.get(tenant, 0) >= cap}
        jobs = (
            Job.objects.using(self.using)
            .filter(state=JobState.AVAILABLE, queue=queue, rate_key__isnull=True)
            .filter(Q(stale_at__isnull=True) | Q(stale_at__gt=now))
        )
        if tenants is not None:
            jobs = jobs.filter(tenant__in=list(tenants))
        skip = held
        found = []
        for job_id, tenant in jobs.order_by("-priority", "vtime", "id").values_list("id", "tenant")[
            :window
        ]:
            if tenant not in skip:
                found.append((job_id, tenant))
                if len(found) >= limit:
                    break
        return found

    def fair_bases(
        self, keys: Sequence[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[float, float]]:
        """For each (queue, tenant, priority): the larger of the smallest ``vtime`` of the
        tenanted jobs waiting in that queue and priority (its head) and the largest of
        that tenant's (its tail), and 1 / the tenant's weight (``lifecycle.fairness``).

        Two index probes per key: the head along ojs_job_claim_idx, the tail along
        ojs_job_tenant_claim_idx (backwards); the weights in one read.
        """
        jobs = Job.objects.using(self.using).filter(state="available")
        now = timezone.now()
        weights = {
            tenant: throttled if throttled is not None and until and until > now else weight
            for tenant, weight, throttled, until in Tenant.objects.using(self.using)
            .filter(tenant_id__in={tenant for _, tenant, _ in keys})
            .values_list("tenant_id", "weight", "throttled_weight", "throttled_until")
        }
        out = {}
        for queue, tenant, priority in keys:
            at = jobs.filter(queue=queue, priority=priority)
            head = at.filter(vtime__gt=0).order_by("vtime").values_list("vtime", flat=True)
            tail = at.filter(tenant=tenant).exclude(tenant="").order_by("-vtime")
            out[(queue, tenant, priority)] = (
                max(head.first() or 0.0, tail.values_list("vtime", flat=True).first() or 0.0),
                1.0 / weights.get(tenant, 1.0),
            )
        return out

    def distinct_tenants(self, after: str, limit: int) -> list[str]:
        """Up to ``limit`` of the tenants jobs name, in order, after ``after``."""
        return list(
            Job.objects.using(self.using)
            .filter(tenant__gt=after)
            .exclude(tenant="")
            .order_by("tenant")
            .values_list("tenant", flat=True)
            .distinct()[:limit]
        )

    def lock_rows(self, queryset: QuerySet[Job], *, limit: int, skip_locked: bool) -> list[Job]:
        return list(queryset.select_for_update(skip_locked=skip_locked)[:limit])

    def update_if(self, job_id: Any, *, state: str, attempt: int, fields: dict[str, Any]) -> bool:
        changed = (
            Job.objects.using(self.using)
            .filter(pk=job_id, state=state, attempt=attempt)
            .update(**fields)
        )
        return changed == 1

    def push_one(
        self, job: Job, *, available: bool, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        rows = [] if events is EventMode.NONE else job_rows([enqueue_event(job)], source, now)
        with transaction.atomic(using=self.using):
            job.save(using=self.using, force_insert=True)
            if events.stored:
                self.insert_events(rows)
            self.after_push({job.queue}, {job.queue} if available else set())
        return rows if events.returned else []

    def push_many(
        self, batches: Iterable[Sequence[Job]], *, now: datetime, events: EventMode, source: str
    ) -> list[EventRow]:
        jobs = [job for batch in batches for job in batch]
        Job.objects.using(self.using).bulk_create(jobs, batch_size=500)
        rows = [] if events is EventMode.NONE else job_rows(map(enqueue_event, jobs), source, now)
        if events.stored:
            self.insert_events(rows)
        self.after_push(*pushed_queues(jobs))
        return rows if events.returned else []

    def after_push(self, queues: set[str], available: set[str]) -> None:
        Queue.objects.using(self.using).bulk_create(
            [Queue(name=name) for name in sorted(queues)], ignore_conflicts=True
        )

    def complete_many(
        self,
        items: Sequence[Completion],
        *,
        worker_id: str | None,
        now: datetime,
        events: EventMode,
        source: str,
        fields: Sequence[str] | None,
        without_workflow: bool = False,
        queues: Sequence[str] | None = None,
    ) -> Written:
        wanted = {item.job_id: item for item in items}
        jobs = Job.objects.using(self.using)
        guard = Q(state="active")
        if without_workflow:
            guard &= Q(workflow__isnull=True)
        if queues is not None:
            names, prefixes = split_patterns(queues)
            allowed = Q(queue__in=names)
            for prefix in prefixes:
                allowed |= Q(queue__startswith=prefix)
            guard &= allowed
        if worker_id is not None:
            guard &= Q(worker_id=worker_id) | Q(worker_id__isnull=True)
        with transaction.atomic(using=self.using):
            # Rows are locked (PostgreSQL) or the IMMEDIATE transaction holds SQLite's
            # write lock, so the attempts read here are still current when the UPDATE runs.
            current = jobs.filter(guard, id__in=list(wanted)).select_for_update()
            if fields is not None:
                current = current.only(
                    *{"id", "type", "queue", "state", "attempt", "started_at", "meta", *fields}
                )
            owned = [
                job
                for job in current
                if wanted[job.id].attempt is None or job.attempt == wanted[job.id].attempt
            ]
            if not owned:
                return Written()
            common: dict[str, Any] = {
                "state": "completed",
                "completed_at": now,
                "error": None,
                **RELEASED,
            }
            with_result = [job.id for job in owned if wanted[job.id].result is not None]
            without = [job.id for job in owned if wanted[job.id].result is None]
            if without:
                jobs.filter(guard, id__in=without).update(result=None, **common)
            if with_result:
                jobs.filter(guard, id__in=with_result).update(
                    result=Case(
                        *[
                            When(id=i, then=Value(wanted[i].result, output_field=JSONField()))
                            for i in with_result
                        ],
                        output_field=JSONField(),
                    ),
                    **common,
                )
            for job in owned:
                job.result = wanted[job.id].result
                for name, value in common.items():
                    setattr(job, name, value)
            rows: list[EventRow] = []
            if events is not EventMode.NONE:
                rows = job_rows(
                    (
                        (
                            "job.completed",
                            job,
                            {
                                "attempt": job.attempt,
                                "duration_ms": elapsed_ms(job.started_at, now),
                                "result": job.result,
                            },
                        )
                        for job in owned
                    ),
                    source,
                    now,
                )
            if events.stored:
                self.insert_events(rows)
        return Written(owned, rows if events.returned else [])

    def wait_finished(self, job_id: Any, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        delay = 0.01
        jobs = Job.objects.using(self.using).filter(pk=job_id)
        while True:
            state = jobs.values_list("state", flat=True).first()
            left = deadline - time.monotonic()
            if state is None or state in TERMINAL_STATES or left <= 0:
                return state
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.5)

    def insert_events(self, rows: list[EventRow]) -> None:
        if rows:
            Event.objects.using(self.using).bulk_create(
                [Event(**row._asdict()) for row in rows], batch_size=500
            )
