"""FETCH (OJS core §7.2, worker protocol §6): claim available jobs for a worker.

One fetch path for HTTP workers and the in-process ``ojs_worker``. The vendor-specific
statement is the driver's ``claim``; this module orders queues, records the worker's sign
of life and emits ``job.started``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from django_ojs.conf import settings
from django_ojs.drivers import Listener, get_driver
from django_ojs.lifecycle import events
from django_ojs.lifecycle.maintenance import promote_due
from django_ojs.lifecycle.store import db
from django_ojs.models import Job, Worker
from django_ojs.policy import configured
from django_ojs.validation import (
    duration_ms,
    validate_fetch_count,
    validate_queues,
    validate_worker_id,
)


def fetch(
    queues: Sequence[str],
    count: int = 1,
    *,
    worker_id: str | None = None,
    visibility_timeout: float | timedelta | None = None,
    fields: Sequence[str] | None = None,
    using: str | None = None,
) -> list[Job]:
    """Claim up to ``count`` available jobs and return them ``active``.

    Queues are tried in the order given; within a queue, priority high→low, then FIFO.
    Each claimed job has ``attempt`` incremented, ``started_at`` set and a reservation of
    ``visibility_timeout`` seconds (else the job's own, else ``OJS_VISIBILITY_TIMEOUT``).
    Exactly one caller gets each job, even under concurrency (core §6.5(2)). Returns an
    empty list when there is no work; never blocks.

    Parameters
    ----------
    queues:
        Queue names, most important first.
    count:
        Maximum number of jobs to claim (1 to 1000).
    worker_id:
        The claiming worker; recorded as the reservation holder. A worker row is created
        or refreshed on the way (worker protocol §3: registration by first contact).
    visibility_timeout:
        Reservation length in seconds (or a ``timedelta``) for these jobs.
    fields:
        Load only these job fields (plus ``id``; the others are deferred). The in-process
        worker asks for the few it needs, which makes its fetches much cheaper.
    """
    using = db(using)
    queues = validate_queues(queues)
    count = validate_fetch_count(count)
    worker_id = validate_worker_id(worker_id)
    visibility_ms = duration_ms(visibility_timeout, "visibility_timeout")
    defaults = configured()
    driver = get_driver(using)
    now = timezone.now()
    claimed: list[Job] = []
    written: list[events.EventRow] = []
    mode = events.mode()
    with transaction.atomic(using=using):
        # Lazy promotion: a retry or scheduled job whose time has come is fetchable now,
        # not only after the reaper's next pass (a backoff is a minimum wait, retry §5).
        # It waits for a promotion the reaper has in flight (the reaper only ever skips
        # locked rows, so it never waits on us): each statement below then sees it.
        promote_due(now=now, queues=list(queues), wait=True, using=using)
        if worker_id:
            _touch_worker(worker_id, list(queues), using, now)
        for queue in dict.fromkeys(queues):  # keep order, drop repeats
            remaining = count - len(claimed)
            if remaining <= 0:
                break
            # The driver claims and writes the job.started events in one statement.
            result = driver.claim(
                queue,
                remaining,
                worker_id=worker_id,
                now=now,
                visibility_ms=visibility_ms,
                defaults=defaults,
                fields=fields,
                events=mode,
                source=settings.EVENT_SOURCE,
            )
            claimed.extend(result.jobs)
            written.extend(result.events)
        events.signal(written, using)
    return claimed


def _touch_worker(worker_id: str, queues: list[str], using: str, now: datetime) -> None:
    # One upsert: create the worker on first contact, else refresh its sign of life.
    Worker.objects.using(using).bulk_create(
        [Worker(id=worker_id, queues=queues, started_at=now, last_heartbeat_at=now)],
        update_conflicts=True,
        unique_fields=["id"],
        update_fields=["last_heartbeat_at"],
    )


def listen(queues: Sequence[str], *, using: str | None = None) -> Listener:
    """A new listener that wakes when work may be available in ``queues`` (one per loop).

    PostgreSQL: a dedicated ``LISTEN`` connection; SQLite: polling. Call ``wait(timeout)``,
    ``wake()`` from another thread, and ``close()`` when done.
    """
    return get_driver(db(using)).listener(list(queues))
