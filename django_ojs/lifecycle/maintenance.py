"""Time-driven transitions the reaper calls: promote, expire, rescue, recover, prune.

Each function handles a bounded batch and returns how many jobs it moved, so callers can
loop until 0. Rows are locked with ``SKIP LOCKED`` on PostgreSQL so two reapers never
fight over a row; every write is still a compare-and-set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, F, Q, QuerySet, Value
from django.utils import timezone

from django_ojs import envelope, failure
from django_ojs.drivers import get_driver
from django_ojs.exceptions import InvalidTransition
from django_ojs.lifecycle import events, fairness
from django_ojs.lifecycle.settle import discard_with, settle_failure
from django_ojs.lifecycle.store import db
from django_ojs.lifecycle.workers import stale_before
from django_ojs.models import Event, Job, Queue, Worker, Workflow
from django_ojs.policy import effective, ms_to_seconds
from django_ojs.states import JobState

BATCH = 500


def _lock(qs: QuerySet[Job], using: str, *, wait: bool = False) -> list[Job]:
    """Lock a batch of rows, skipping rows another transaction holds (unless ``wait``).

    On SQLite ``select_for_update`` does nothing (its IMMEDIATE transaction already holds
    the single write lock), so this needs no vendor branch.
    """
    return get_driver(using).lock_rows(qs, limit=BATCH, skip_locked=not wait)


def promote_due(
    *,
    now: datetime | None = None,
    queues: Sequence[str] | None = None,
    wait: bool = False,
    using: str | None = None,
) -> int:
    """``scheduled → available`` and ``retryable → available`` for jobs whose time has come.

    ``queues`` limits the pass to those queues (``fetch`` promotes lazily this way).
    With ``wait``, rows another transaction is promoting are waited for, not skipped:
    ``fetch`` must not miss a due job because the reaper is promoting it at that instant.
    """
    using = db(using)
    now = now or timezone.now()
    # No savepoint: inside a fetch's transaction a failure here fails the fetch anyway,
    # and a savepoint is two more round trips on every fetch.
    with transaction.atomic(using=using, savepoint=False):
        jobs = get_driver(using).promote_due(now=now, queues=queues, wait=wait, limit=BATCH)
        if not jobs:
            return 0
        fairness.restamp(jobs, using)  # the tenants' jobs take their turns from now
        # job.enqueued marks the entry into 'available' of a scheduled job; a retry's
        # return to the queue was announced by job.retrying.
        events.emit_many(
            [
                ("job.enqueued", j, {"priority": j.priority, "scheduled_at": j.scheduled_at})
                for j in jobs
                if j.previous_state == JobState.SCHEDULED
            ],
            using,
            now,
        )
        moved = {j.queue for j in jobs}
        get_driver(using).after_push(moved, moved)
    return len(jobs)


def _timeout_error(
    kind: str, type_: str, limit_ms: int, elapsed: timedelta, message: str
) -> dict[str, Any]:
    return {
        "code": "timeout",
        "type": type_,
        "message": message,
        "timeout_kind": kind,
        "limit_seconds": round(limit_ms / 1000, 3),
        "elapsed_seconds": round(elapsed.total_seconds(), 3),
    }


def expire_stale(*, now: datetime | None = None, using: str | None = None) -> int:
    """Discard waiting jobs past ``expires_at``, their enqueue TTL or their total timeout.

    Error types: ``expired`` (``job.expired``), ``enqueue_ttl_expired``
    (``job.ttl_expired``) and ``total_timeout`` (``job.total_timeout``), timeouts §8.
    """
    using = db(using)
    now = now or timezone.now()
    count = 0
    with transaction.atomic(using=using):
        for job in _lock(Job.objects.using(using).stale(now).order_by("stale_at"), using):
            age = now - job.created_at
            if job.deadline_at is not None and job.deadline_at <= now:
                error = _timeout_error(
                    "total", "total_timeout", job.total_timeout_ms or 0, age,
                    f"Job exceeded its total timeout of {(job.total_timeout_ms or 0) / 1000:g} seconds",
                )  # fmt: skip
                kind = "job.total_timeout"
            elif job.expires_at is not None and job.expires_at <= now:
                error = {
                    "code": "expired",
                    "type": "expired",
                    "message": "Job expired before it could start",
                    "expired_at": envelope.format_timestamp(job.expires_at),
                }
                kind = "job.expired"
            else:
                error = _timeout_error(
                    "enqueue_ttl", "enqueue_ttl_expired", job.enqueue_ttl_ms or 0, age,
                    f"Job waited longer than its enqueue TTL of {(job.enqueue_ttl_ms or 0) / 1000:g} seconds",
                )  # fmt: skip
                kind = "job.ttl_expired"
            entry = failure.entry({**error, "retryable": False}, attempt=job.attempt, now=now)
            expiry = {
                "created_at": job.created_at,
                "expired_at": now,
                "ttl_ms": job.enqueue_ttl_ms,
                "error": failure.summary(entry),
            }
            try:
                discard_with(
                    job,
                    entry,
                    using,
                    now,
                    operation="expire",
                    reason=entry["type"],
                    first=(kind, expiry),
                )
            except InvalidTransition:
                continue
            count += 1
    return count


def rescue_expired(*, now: datetime | None = None, using: str | None = None) -> int:
    """Resolve active jobs whose attempt can no longer succeed (timeouts §7, §8).

    In order of precedence: past the total timeout → ``discarded`` (``total_timeout``);
    past ``started_at + timeout + grace_period`` → retry policy (``timeout``); silent past
    ``heartbeat_timeout`` → retry policy (``stalled``); past the reservation →
    ``available`` again, or ``discarded`` when attempts are spent (``visibility_timeout``).
    """
    using = db(using)
    now = now or timezone.now()
    count = 0
    with transaction.atomic(using=using):
        for job in _lock(Job.objects.using(using).expired(now).order_by("started_at"), using):
            elapsed = now - (job.started_at or now)
            extra_events: tuple[str, ...] = ()
            requeue = force = False
            if job.deadline_at is not None and job.deadline_at <= now:
                error = _timeout_error(
                    "total", "total_timeout", job.total_timeout_ms or 0, now - job.created_at,
                    f"Job exceeded its total timeout of {(job.total_timeout_ms or 0) / 1000:g} seconds",
                )  # fmt: skip
                extra_events, force = ("job.total_timeout",), True
            elif job.timeout_at is not None and job.timeout_at <= now:
                durations = effective(job)
                limit = durations.timeout_ms
                error = _timeout_error(
                    "execution",
                    "timeout",
                    limit,
                    elapsed,
                    f"Job execution exceeded timeout of {limit / 1000:g} seconds "
                    f"(plus a {ms_to_seconds(durations.grace_ms):g} second grace period)",
                )  # fmt: skip (settle_failure adds the job.timeout event)
            elif job.stalled_at is not None and job.stalled_at <= now:
                limit = effective(job).heartbeat_timeout_ms
                error = _timeout_error(
                    "stalled", "stalled", limit, now - (job.heartbeat_at or job.started_at or now),
                    f"No heartbeat for {limit / 1000:g} seconds: the job is stalled",
                )  # fmt: skip
                extra_events = ("job.stalled",)
            else:
                error = {
                    "code": "timeout",
                    "type": "visibility_timeout",
                    "message": "The reservation expired without ACK or FAIL",
                    "worker_id": job.worker_id,
                }
                # Digest §8.2: straight back to available (no backoff), or discarded.
                extra_events, requeue = ("job.stalled",), True
            entry = failure.entry(error, attempt=job.attempt, now=now)
            try:
                settle_failure(
                    job, entry, using, now, requeue=requeue, extra_events=extra_events,
                    operation="rescue", force_discard=force,
                )  # fmt: skip
            except InvalidTransition:
                continue
            count += 1
    return count


def recover_dead_workers(
    *,
    now: datetime | None = None,
    using: str | None = None,
    worker_ids: Sequence[str] | None = None,
) -> int:
    """Recover the jobs of workers silent past ``OJS_WORKER_STALE_AFTER`` (worker protocol §10).

    Their active jobs go back to ``available`` (or ``discarded`` when attempts are spent)
    with error type ``worker_death``; the dead workers are removed. ``worker_ids``: only
    these (an operator deregistering one stale worker). Returns jobs recovered.
    """
    using = db(using)
    now = now or timezone.now()
    count = 0
    with transaction.atomic(using=using):
        dead = list(
            Worker.objects.using(using)
            .stale(stale_before(now))
            .filter(**({} if worker_ids is None else {"id__in": list(worker_ids)}))
            .values_list("id", flat=True)[:BATCH]
        )
        if not dead:
            return 0
        jobs = _lock(
            Job.objects.using(using).active().filter(worker_id__in=dead).order_by("id"), using
        )
        for job in jobs:
            entry = failure.entry(
                {
                    "code": "worker_death",
                    "type": "worker_death",
                    "message": f"Worker '{job.worker_id}' stopped sending heartbeats",
                    "worker_id": job.worker_id,
                },
                attempt=job.attempt,
                now=now,
            )
            try:
                settle_failure(job, entry, using, now, requeue=True, operation="rescue")
            except InvalidTransition:
                continue
            count += 1
        Worker.objects.using(using).filter(id__in=dead).delete()
        for worker_id in dead:
            events.emit_other(
                "worker.stopped", worker_id, using, worker_id=worker_id, reason="heartbeat_timeout"
            )
    return count


#: Per-queue cut-offs: ``{queue: {"completed_before": datetime, ...}}`` (see :func:`prune`).
QueueCutoffs = Mapping[str, Mapping[str, datetime | None]]
#: The job kinds a queue's own retention may change (queue config §6.3), by cut-off name.
QUEUE_KINDS = {
    "completed": "completed_before",
    "discarded": "discarded_before",
    "cancelled": "cancelled_before",
}


def prune(
    *,
    completed_before: datetime | None = None,
    discarded_before: datetime | None = None,
    dead_letter_before: datetime | None = None,
    cancelled_before: datetime | None = None,
    events_before: datetime | None = None,
    workflows_before: datetime | None = None,
    queues: QueueCutoffs | None = None,
    limit: int | None = None,
    using: str | None = None,
) -> dict[str, int]:
    """Delete finished jobs, workflows and events older than the given times (retention).

    ``limit`` caps the rows deleted per kind (completed, discarded, ... events), oldest
    ids first, so one call is a short transaction; call it again until every count is
    below ``limit`` (the reaper does, one call per transaction: ``reaper.prune_expired``).

    Plain discards and dead-lettered jobs (``dead_letter=True``) have separate cut-offs:
    the dead letter queue is kept longer (DLQ §8, digest §8.22). ``None`` keeps all.

    ``queues`` holds the cut-offs of the queues with their own retention (queue config
    §6.3): ``{"reports": {"completed_before": t}}`` prunes the completed jobs of
    ``reports`` by ``t`` instead of ``completed_before`` (``None`` there keeps them); the
    kinds a queue does not name follow the given cut-offs. Each queue's jobs are one
    more statement of the same indexed shape, with the queue as one more condition.

    A workflow's jobs are its graph: they are never pruned one by one while the outermost
    workflow is ``pending``, ``running`` or ``failed`` (a failed workflow can be resumed
    by retrying its failed steps). A completed or cancelled workflow is deleted, with the
    workflows nested in it and every job left of them, once it finished before
    ``workflows_before``; a failed one once it finished before ``dead_letter_before``.
    """
    using = db(using)
    out = {
        "completed": 0, "discarded": 0, "dead_letter": 0, "cancelled": 0, "events": 0,
        "workflows": 0,
    }  # fmt: skip
    groups = prune_groups(
        completed_before=completed_before,
        discarded_before=discarded_before,
        dead_letter_before=dead_letter_before,
        cancelled_before=cancelled_before,
        queues=queues,
    )
    jobs = prunable_jobs(using)
    with transaction.atomic(using=using):
        for kind, rules in groups.items():
            for rule in rules:
                left = None if limit is None else limit - out[kind]
                if left is not None and left <= 0:
                    break
                out[kind] += _delete(jobs.filter(rule), left)
        if events_before is not None:
            out["events"] = _delete(
                Event.objects.using(using).filter(time__lt=events_before), limit
            )
        roots = Workflow.objects.using(using).filter(root__isnull=True)
        done = Q(pk__in=[])
        if workflows_before is not None:
            done |= Q(state__in=("completed", "cancelled"), finished_at__lt=workflows_before)
        if dead_letter_before is not None:
            done |= Q(state="failed", finished_at__lt=dead_letter_before)
        ids = list(roots.filter(done).values_list("pk", flat=True)[:PRUNE_WORKFLOWS])
        if ids:
            family = list(
                Workflow.objects.using(using)
                .filter(Q(pk__in=ids) | Q(root_id__in=ids))
                .values_list("pk", flat=True)
            )
            Job.objects.using(using).filter(workflow_id__in=family).delete()
            Workflow.objects.using(using).filter(pk__in=family).delete()
            out["workflows"] = len(family)
    return out


def prune_groups(
    *,
    completed_before: datetime | None = None,
    discarded_before: datetime | None = None,
    dead_letter_before: datetime | None = None,
    cancelled_before: datetime | None = None,
    queues: QueueCutoffs | None = None,
) -> dict[str, list[Q]]:
    """Which finished jobs retention lets go, per kind, as one condition per statement.

    Without ``queues``, one condition per kind (:func:`prune_rules`). A kind some queues
    set their own cut-off for has one condition for the other queues' jobs (the given
    cut-off, ``queue NOT IN`` those queues) and one per such queue (its own cut-off,
    ``queue = name``): each an index range on the kind's time, as without them.
    """
    given = {
        "completed_before": completed_before,
        "discarded_before": discarded_before,
        "dead_letter_before": dead_letter_before,
        "cancelled_before": cancelled_before,
    }
    groups: dict[str, list[Q]] = {kind: [rule] for kind, rule in prune_rules(**given).items()}
    for kind, cutoff in QUEUE_KINDS.items():
        own = {name: cuts[cutoff] for name, cuts in (queues or {}).items() if cutoff in cuts}
        if not own:
            continue
        rules = [rule & ~Q(queue__in=sorted(own)) for rule in groups.pop(kind, [])]
        for name, before in sorted(own.items()):
            rule = prune_rules(**{cutoff: before}).get(kind)
            if rule is not None:
                rules.append(Q(queue=name) & rule)
        if rules:
            groups[kind] = rules
    return groups


def prune_rules(
    *,
    completed_before: datetime | None = None,
    discarded_before: datetime | None = None,
    dead_letter_before: datetime | None = None,
    cancelled_before: datetime | None = None,
) -> dict[str, Q]:
    """Which finished jobs retention lets go, per kind, by the global cut-offs only."""
    rules: dict[str, Q] = {}
    if completed_before is not None:
        # A job whose result_ttl reaches further than the retention stays until then.
        result_gone = ExpressionWrapper(
            Value(timezone.now(), output_field=DateTimeField()) - F("result_ttl"),
            output_field=DateTimeField(),
        )
        rules["completed"] = Q(state=JobState.COMPLETED, completed_at__lt=completed_before) & (
            Q(result_ttl__isnull=True) | Q(completed_at__lt=result_gone)
        )
    if discarded_before is not None:
        rules["discarded"] = Q(
            state=JobState.DISCARDED, dead_letter=False, discarded_at__lt=discarded_before
        )
    if dead_letter_before is not None:
        rules["dead_letter"] = Q(
            state=JobState.DISCARDED, dead_letter=True, discarded_at__lt=dead_letter_before
        )
    if cancelled_before is not None:
        rules["cancelled"] = Q(state=JobState.CANCELLED, cancelled_at__lt=cancelled_before)
    return rules


def prunable_jobs(using: str) -> QuerySet[Job]:
    """Jobs that may be pruned one by one: not the graph of an unfinished workflow.

    A workflow's jobs are never pruned while the outermost workflow is ``pending``,
    ``running`` or ``failed`` (a failed one can be resumed).
    """
    kept = ("pending", "running", "failed")
    return Job.objects.using(using).exclude(
        Q(workflow__root__isnull=True, workflow__state__in=kept) | Q(workflow__root__state__in=kept)
    )


#: Outermost workflows deleted per prune pass (each with all its rows).
PRUNE_WORKFLOWS = 200


def _delete(rows: QuerySet[Any], limit: int | None) -> int:
    """Delete ``rows``, at most ``limit`` of them (lowest primary keys first)."""
    if limit is None:
        return int(rows.delete()[0])
    ids = list(rows.order_by("pk").values_list("pk", flat=True)[:limit])
    if not ids:
        return 0
    return int(rows.model._default_manager.using(rows.db).filter(pk__in=ids).delete()[0])


#: Rows below which a job table is left to autovacuum.
STATISTICS_MIN_ROWS = 1_000
#: Pages (8 kB) of about as many jobs: the size from which a table that was all but
#: empty at its last analysis is analysed, before its count of rows says so.
STATISTICS_MIN_PAGES = 25


def refresh_statistics(*, using: str | None = None) -> list[str]:
    """Analyse the job tables whose statistics are badly out of date (PostgreSQL).

    Autovacuum analyses a table once a tenth of it changed, but a minute or more later;
    a table filled in seconds (a new deployment, a backfill, a burst after a quiet spell)
    is planned on the statistics of the empty one until then, and claims read every
    waiting job to find the first ones. The reaper asks each pass; a table is analysed
    when it holds at least twice the rows it held at its last analysis (and at least
    ``STATISTICS_MIN_ROWS``), which autovacuum keeps from happening on a live system,
    or, since that count lags behind the inserts by seconds, when it was all but empty
    then and its file has grown to ``STATISTICS_MIN_PAGES`` and twice its size.
    Claims and completions change no row count: draining a backlog sets nothing off.
    Returns the tables analysed.
    """
    return get_driver(db(using)).refresh_statistics(
        min_rows=STATISTICS_MIN_ROWS, min_pages=STATISTICS_MIN_PAGES
    )


def purge_all(*, using: str | None = None) -> dict[str, int]:
    """Delete every job, workflow, event, worker and queue row: an empty job store.

    For resetting development and test databases (``manage.py ojs_purge --all``), never
    part of normal operation. API keys are kept. Returns the rows deleted per table.
    """
    using = db(using)
    with transaction.atomic(using=using):
        out = {
            "jobs": Job.objects.using(using).all().delete()[0],
            "workflows": Workflow.objects.using(using).all().delete()[0],
            "events": Event.objects.using(using).all().delete()[0],
            "workers": Worker.objects.using(using).all().delete()[0],
            "queues": Queue.objects.using(using).all().delete()[0],
        }
    return out
