"""Workers (OJS worker protocol §3-§4): registration, BEAT, directives, deregistration.

BEAT extends the reservations of the jobs a worker reports holding and returns the
operator's directive. The only writer of ``Worker`` rows and of job heartbeat fields.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import InvalidTransition, ValidationError, WorkerNotFound
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.store import RELEASE, cas, db
from django_ojs.models import Job, Worker
from django_ojs.policy import configured, effective, ms_delta
from django_ojs.states import JobState
from django_ojs.validation import (
    duration_ms,
    validate_hostname,
    validate_non_negative,
    validate_pool_name,
    validate_queues,
    validate_strings,
    validate_worker_id,
    validate_worker_state,
)

logger = logging.getLogger("django_ojs.worker")

DIRECTIVES = ("", "quiet", "terminate")


@dataclass
class Heartbeat:
    """The reply to a BEAT (HTTP binding §10.4 plus the worker protocol's fields)."""

    worker_id: str
    state: str  # running | quiet | terminate: what the server wants the worker to be
    directive: str  # "" | quiet | terminate (OpenAPI clients read this)
    jobs_extended: list[str] = field(default_factory=list)
    #: Reported jobs that were cancelled meanwhile: the worker should stop them.
    cancelled_jobs: list[str] = field(default_factory=list)
    server_time: datetime = field(default_factory=timezone.now)


def register(
    worker_id: str,
    *,
    hostname: str = "",
    pid: int | None = None,
    queues: Sequence[str] = (),
    concurrency: int | None = None,
    labels: Sequence[str] = (),
    started_at: datetime | None = None,
    pool: str = "",
    using: str | None = None,
) -> Worker:
    """Register (or re-register) a worker process (worker protocol §3.1), as a member
    of ``pool`` when given (fair scheduling §6.2: a worker declares its pool when it
    registers, and belongs to one)."""
    using = db(using)
    pool = validate_pool_name(pool) if pool else ""
    worker_id = validate_worker_id(worker_id, required=True)
    hostname = validate_hostname(hostname) or ""
    queues = validate_queues(queues, allow_empty=True)
    pid = validate_non_negative(pid, "pid")
    concurrency = validate_non_negative(concurrency, "concurrency")
    labels = validate_strings(labels, "labels") or []
    now = timezone.now()
    with transaction.atomic(using=using):
        worker, _ = Worker.objects.using(using).update_or_create(
            id=worker_id,
            defaults={
                "hostname": hostname,
                "pid": pid,
                "queues": list(queues),
                "concurrency": concurrency,
                "labels": list(labels),
                "pool": pool,
                "state": "running",
                "started_at": started_at or now,
                "last_heartbeat_at": now,
            },
        )
        events.emit_other(
            "worker.started",
            worker_id,
            using,
            worker_id=worker_id,
            hostname=hostname,
            pid=pid,
            queues=list(queues),
            concurrency=concurrency,
            **({"pool": pool} if pool else {}),
        )
    return worker


def join_pool(
    worker_id: str, pool: str, queues: Sequence[str], *, using: str | None = None
) -> None:
    """Record that ``worker_id`` is a member of ``pool`` (an HTTP worker's fetch naming
    its pool, fair scheduling §6.2): its row is created on first contact, as a fetch's."""
    using = db(using)
    _record_beat(
        validate_worker_id(worker_id, required=True),
        {"pool": validate_pool_name(pool), "queues": list(queues),
         "last_heartbeat_at": timezone.now()},
        using,
    )  # fmt: skip


def deregister(worker_id: str, *, using: str | None = None) -> None:
    """Remove a worker that is shutting down cleanly (worker protocol §3.4)."""
    using = db(using)
    with transaction.atomic(using=using):
        deleted, _ = Worker.objects.using(using).filter(id=worker_id).delete()
        if deleted:
            events.emit_other("worker.stopped", worker_id, using, worker_id=worker_id)


def set_directive(
    worker_id: str, directive: str, *, actor: Actor | None = None, using: str | None = None
) -> Worker:
    """Ask a worker to go ``quiet``, ``terminate`` or back to running (``""``).

    Delivered in the worker's next heartbeat reply (worker protocol §4.4).
    """
    using = db(using)
    if directive == "running":
        directive = ""
    if directive not in DIRECTIVES:
        raise ValidationError(
            "directive must be 'quiet', 'terminate' or 'running'", field="directive"
        )
    with transaction.atomic(using=using):
        changed = Worker.objects.using(using).filter(id=worker_id).update(directive=directive)
        if not changed:
            raise WorkerNotFound(worker_id)
        audit.record(actor, f"worker.{directive or 'running'}", using, worker_id=worker_id)
        transaction.on_commit(partial(note_worker, worker_id, using), using=using)
        if directive:
            events.emit_other(f"worker.{directive}", worker_id, using, worker_id=worker_id)
        return Worker.objects.using(using).get(id=worker_id)


def beat(
    worker_id: str,
    *,
    active_job_ids: Sequence[Any] | None = None,
    visibility_timeout: float | timedelta | None = None,
    state: str | None = None,
    hostname: str | None = None,
    pid: int | None = None,
    queues: Sequence[str] | None = None,
    concurrency: int | None = None,
    labels: Sequence[str] | None = None,
    pool: str | None = None,
    as_of: datetime | None = None,
    using: str | None = None,
) -> Heartbeat:
    """Record a worker's heartbeat and extend the reservations of the jobs it holds.

    A job is extended only if it is still ``active`` and reserved by this worker (or
    by nobody, for clients that fetch without a worker id). Reported jobs that were
    cancelled come back in ``cancelled_jobs``. A worker never seen before is created.

    ``as_of``: the worker vouches that ``active_job_ids`` holds every job it received
    from the fetches it started before this time (on the clock its fetches stamp
    ``started_at`` with). A job active and reserved by this worker, claimed before
    ``as_of`` and not in the list, was claimed by a fetch whose reply never reached the
    worker (a pooler restart, a cut connection): it goes back to ``available`` at once,
    its attempt not spent (:func:`release_unreceived`), instead of waiting out its
    reservation and counting as an attempt that ran. Without ``as_of`` nothing is
    released. HTTP workers may send it as an extension field of their heartbeat
    (``api.serializers.heartbeat_request``: a time the server sent, less a second for
    the web processes' clocks).
    """
    using = db(using)
    worker_id = validate_worker_id(worker_id, required=True)
    state = validate_worker_state(state)
    hostname = validate_hostname(hostname)
    pid = validate_non_negative(pid, "pid")
    concurrency = validate_non_negative(concurrency, "concurrency")
    if queues is not None:
        queues = validate_queues(queues, allow_empty=True)
    labels = validate_strings(labels, "labels")
    if pool is not None:
        pool = validate_pool_name(pool) if pool else ""
    ids = _job_ids(active_job_ids)
    requested = duration_ms(visibility_timeout, "visibility_timeout")
    now = timezone.now()
    info: dict[str, Any] = {
        "last_heartbeat_at": now,
        "active_job_ids": [str(i) for i in ids],
    }
    for name, value in (
        ("state", state),
        ("hostname", hostname),
        ("pid", pid),
        ("queues", list(queues) if queues is not None else None),
        ("concurrency", concurrency),
        ("labels", list(labels) if labels is not None else None),
        ("pool", pool),
    ):
        if value is not None:
            info[name] = value
    if as_of is not None:
        release_unreceived(worker_id, ids, as_of, using=using, now=now)
    if not ids:
        # Nothing to extend: the worker's row alone, outside a transaction: one statement
        # on PostgreSQL, two elsewhere (driver.record_beat; a transaction, a savepoint and
        # a locking read around them were four more).
        directive = _record_beat(worker_id, info, using)
        extended: list[str] = []
        cancelled: list[str] = []
    else:
        with transaction.atomic(using=using):
            directive = _record_beat(worker_id, info, using)
            extended, cancelled = _extend(worker_id, ids, requested, now, using)
    if state is not None:
        # Its fetches in this process see the state it reported at once, once committed.
        transaction.on_commit(partial(note_worker, worker_id, using), using=using)
    return Heartbeat(
        worker_id=worker_id,
        state=directive or "running",
        directive=directive,
        jobs_extended=extended,
        cancelled_jobs=cancelled,
        server_time=now,
    )


def _extend(
    worker_id: str, ids: list[Any], requested: int | None, now: datetime, using: str
) -> tuple[list[str], list[str]]:
    """Extend the reservations of the reported jobs ``worker_id`` holds (in the caller's
    transaction); return the ids extended and those cancelled meanwhile."""
    # The reported jobs are read and locked by primary key alone, in id order
    # (a batch ACK walks the same index); state and reservation are checked here. With
    # those conditions in SQL, a table without column statistics was read
    # through the index of active jobs, which keeps an entry for every job
    # claimed since the last vacuum: seconds per beat in a long drain.
    held = get_driver(using).lock_rows(
        Job.objects.using(using)
        .filter(id__in=ids)
        .order_by("id")
        .only("id", "type", "queue", "state", "meta", "attempt", "worker_id",
              "visibility_timeout_ms", "heartbeat_timeout_ms", "timeout_ms",
              "grace_period_ms"),  # what effective reads
        limit=len(ids),
        skip_locked=False,
    )  # fmt: skip
    owned = [
        job for job in held if job.state == JobState.ACTIVE and job.worker_id in (worker_id, None)
    ]
    cancelled = [str(job.id) for job in held if job.state == JobState.CANCELLED]
    groups: dict[tuple[int, int], list[Job]] = defaultdict(list)
    defaults = configured()
    for job in owned:
        d = effective(job, visibility_ms=requested, defaults=defaults)
        groups[(d.visibility_ms, d.heartbeat_timeout_ms)].append(job)
    for (vis, hb), jobs in groups.items():
        Job.objects.using(using).filter(id__in=[j.id for j in jobs]).update(
            visible_until=now + ms_delta(vis),
            stalled_at=now + ms_delta(hb),
            heartbeat_at=now,
        )
        for job in jobs:
            job.visible_until = now + ms_delta(vis)
    extended = [str(job.id) for job in owned]
    events.emit_many(
        [
            (
                "job.heartbeat",
                job,
                {
                    "worker_id": worker_id,
                    "attempt": job.attempt,
                    "visible_until": job.visible_until,
                },
            )
            for job in owned
        ],
        using,
        now,
    )
    return extended, cancelled


def release_unreceived(
    worker_id: str,
    held: Sequence[Any],
    as_of: datetime,
    *,
    using: str | None = None,
    now: datetime | None = None,
) -> list[Job]:
    """Give back the jobs claimed for ``worker_id`` before ``as_of`` that it does not hold.

    Each such job (``active``, reserved by ``worker_id``, ``started_at`` before
    ``as_of``, its id not in ``held``) never reached the worker: it becomes
    ``available`` again, its ``attempt`` back to what it was before the claim, with no
    error recorded and a ``job.released`` event (``reason: "claim_not_received"``;
    ``attempt`` is the attempt number the lost claim had given it).
    Compare-and-set on state and attempt, as every transition: a job settled meanwhile
    is left alone. Returns the jobs released.
    """
    using = db(using)
    now = now or timezone.now()
    unreceived = (
        Job.objects.using(using)
        .filter(state=JobState.ACTIVE, worker_id=worker_id, started_at__lt=as_of)
        .exclude(id__in=_job_ids(list(held)))
    )
    # One read, outside any transaction, on nearly every beat: usually nothing is found.
    if not unreceived.exists():
        return []
    released: list[Job] = []
    with transaction.atomic(using=using):
        candidates = get_driver(using).lock_rows(
            unreceived.order_by("id").only(
                "id", "type", "queue", "state", "attempt", "meta", "worker_id", "started_at"
            ),
            limit=RELEASE_BATCH,
            skip_locked=True,
        )
        for job in candidates:
            attempt = job.attempt
            try:
                # As a rescue that requeues (same fields), and the claim's increment undone.
                cas(
                    job, "rescue", using, state=JobState.AVAILABLE, attempt=max(attempt - 1, 0),
                    enqueued_at=now, next_attempt_at=None, **RELEASE,
                )  # fmt: skip
            except InvalidTransition:
                continue
            released.append(job)
        if released:
            events.emit_many(
                [
                    (
                        "job.released",
                        job,
                        {"worker_id": worker_id, "attempt": job.attempt + 1,
                         "reason": "claim_not_received"},
                    )
                    for job in released
                ],
                using,
                now,
            )  # fmt: skip
            get_driver(using).after_push({j.queue for j in released}, {j.queue for j in released})
    if released:
        logger.warning(
            "worker %s did not receive %d claimed job(s) (a lost fetch reply): released",
            worker_id,
            len(released),
        )
    return released


#: At most this many unreceived jobs are released per heartbeat (the next beat takes more).
RELEASE_BATCH = 1000


def _record_beat(worker_id: str, info: dict[str, Any], using: str) -> str:
    """Write a beat's fields on the worker's row (creating it on first contact, as
    ``update_or_create`` did, without its savepoint and locking read); return the
    directive waiting for it (``""``: none)."""
    directive = get_driver(using).record_beat(worker_id, info)
    if directive is not None:
        return directive
    # First contact, or a row removed meanwhile: insert it, or update it if another beat
    # of the same worker inserted it first.
    workers = Worker.objects.using(using)
    workers.bulk_create(
        [Worker(id=worker_id, **info)],
        update_conflicts=True,
        unique_fields=["id"],
        update_fields=list(info),
    )
    return workers.filter(id=worker_id).values_list("directive", flat=True).first() or ""


def _job_ids(values: Sequence[Any] | None) -> list[Any]:
    import uuid

    if values is None:
        return []
    if isinstance(values, str) or not isinstance(values, list | tuple | set):
        raise ValidationError("active job ids must be a list", field="active_job_ids")
    ids = []
    for value in values:
        try:
            ids.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except (ValueError, TypeError, AttributeError):
            continue  # an id that cannot be ours is simply not extended
    return ids


def stale_before(now: datetime) -> datetime:
    """Workers whose last heartbeat is older than this are dead."""
    return now - timedelta(seconds=settings.WORKER_STALE_AFTER)


#: The worker states (reported in its heartbeats, or ordered by an operator as its
#: directive) in which it gets no new jobs.
STOPPING = ("quiet", "terminate")
#: How often a process reads a fetching worker's state (seconds).
STOPPING_READ_EVERY = 1.0
#: Whether each (database, worker) was stopping when last read here, and when, on
#: ``_clock``.
_stopping: dict[tuple[str, str], tuple[float, bool]] = {}
_clock = time.monotonic


def stopping(worker_id: str, using: str) -> bool:
    """Whether ``worker_id`` reported ``quiet`` or ``terminate``, or an operator ordered it
    to (graceful shutdown §5.1: "the backend MUST NOT assign new jobs to a quiet worker";
    worker protocol §4).

    Read from its row at most once a :data:`STOPPING_READ_EVERY` seconds per process, so an HTTP worker
    fetching in a loop costs a statement a second, not one a fetch; a heartbeat or
    directive recorded in this process counts at once (:func:`note_worker`), one
    recorded in another process within that second.
    """
    key = (using, worker_id)
    now = _clock()
    seen = _stopping.get(key)
    if seen is not None and now - seen[0] < STOPPING_READ_EVERY:
        return seen[1]
    found = (
        Worker.objects.using(using)
        .filter(Q(state__in=STOPPING) | Q(directive__in=STOPPING), id=worker_id)
        .exists()
    )
    if len(_stopping) >= 4096:  # worker ids come from clients: never grow without bound
        _stopping.clear()
    _stopping[key] = (now, found)
    return found


def note_worker(worker_id: str, using: str) -> None:
    """Forget what this process knew of ``worker_id``'s state: its next fetch reads it."""
    _stopping.pop((using, worker_id), None)
