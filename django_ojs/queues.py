"""Queue-level operations: pause, resume, list and count. Not job transitions.

Pausing stops FETCH from a queue; enqueueing is still accepted (digest §8.17). Pause and
resume are lifecycle operations (they write ``Queue`` rows and events); this module reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count

from django_ojs import lifecycle
from django_ojs.actors import Actor
from django_ojs.conf import DEFAULT_QUEUE
from django_ojs.models import Job, Queue
from django_ojs.states import JobState


def pause(
    name: str, *, by: str | None = None, actor: Actor | None = None, using: str | None = None
) -> Queue:
    """Stop workers from fetching ``name`` (idempotent); see :func:`lifecycle.pause_queue`."""
    return lifecycle.pause_queue(name, by=by, actor=actor, using=using)


def resume(
    name: str, *, by: str | None = None, actor: Actor | None = None, using: str | None = None
) -> Queue:
    """Let workers fetch ``name`` again (idempotent); see :func:`lifecycle.resume_queue`."""
    return lifecycle.resume_queue(name, by=by, actor=actor, using=using)


@dataclass
class QueueInfo:
    name: str
    paused: bool = False
    paused_at: datetime | None = None
    created_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    #: Queue-level limits (``{"concurrency": N}``), ``None`` when there are none.
    limits: dict[str, Any] | None = None
    #: The queue's own retention in seconds per kind (queue config §6.3), ``None`` if none.
    retention: dict[str, Any] | None = None


def list_queues(*, with_counts: bool = False, using: str | None = None) -> list[QueueInfo]:
    """Every known queue (the ``default`` queue always exists), by name."""
    using = lifecycle.database(using)
    infos = {
        q.name: QueueInfo(
            q.name, q.paused, q.paused_at, q.created_at, limits=q.limits, retention=q.retention
        )
        for q in Queue.objects.using(using).all()
    }
    infos.setdefault(DEFAULT_QUEUE, QueueInfo(DEFAULT_QUEUE))
    if with_counts:
        for info in infos.values():
            info.counts = {s.value: 0 for s in JobState}
        # (state, queue) in the order of ojs_job_state_queue_idx and COUNT(*): PostgreSQL
        # answers from that index alone (an index-only scan), never the table's rows.
        rows = Job.objects.using(using).values("state", "queue").annotate(n=Count("*")).order_by()
        for row in rows:
            info = infos.setdefault(row["queue"], QueueInfo(row["queue"]))
            info.counts = info.counts or {s.value: 0 for s in JobState}
            info.counts[row["state"]] = row["n"]
    return sorted(infos.values(), key=lambda i: i.name)


def counts(
    name: str, *, tenants: Sequence[str] | None = None, using: str | None = None
) -> dict[str, Any]:
    """Jobs of queue ``name`` by state; with ``tenants``, only those tenants' jobs
    (multi-tenancy §5: a tenant's statistics reflect its own jobs)."""
    using = lifecycle.database(using)
    out = {s.value: 0 for s in JobState}
    jobs = Job.objects.using(using).filter(queue=name)
    if tenants is not None:
        jobs = jobs.filter(tenant__in=list(tenants))
    for row in jobs.values("state").annotate(n=Count("id")).order_by():
        out[row["state"]] = row["n"]
    return out
