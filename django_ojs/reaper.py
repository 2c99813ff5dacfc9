"""The maintenance loop: promote due jobs, expire stale ones, rescue lost attempts, prune,
and make the webhook deliveries of new events.

Scheduling and logging only: every transition it causes is a ``lifecycle`` call
(``promote_due``, ``expire_stale``, ``rescue_expired``, ``recover_dead_workers``,
``prune``, ``dispatch_webhooks``). On PostgreSQL one reaper at a time does a pass (a transaction-scoped advisory
lock); the others skip it. On PostgreSQL rows are also locked with ``SKIP LOCKED``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from django_ojs import lifecycle, resilience
from django_ojs.conf import settings

logger = logging.getLogger("django_ojs.reaper")

LOCK_NAME = "django_ojs.reaper"


@dataclass
class PassResult:
    """What one reaper pass did (``leader=False``: skipped, another reaper leads)."""

    leader: bool = True
    promoted: int = 0
    expired: int = 0
    rescued: int = 0
    recovered: int = 0
    cron_fired: int = 0
    cron_skipped: int = 0
    #: Webhook delivery jobs pushed for the events stored since the last pass.
    webhooks: int = 0
    pruned: dict[str, int] = field(default_factory=dict)
    #: Job tables analysed because their statistics were badly out of date (PostgreSQL).
    analyzed: list[str] = field(default_factory=list)
    #: Tenants throttled (or whose throttle was renewed) as noisy neighbours, and why.
    throttled: dict[str, str] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        return self.promoted + self.expired + self.rescued + self.recovered


def run_once(*, prune: bool = False, using: str | None = None) -> PassResult:
    """One maintenance pass. Loops each step until its batch comes back short."""
    using = lifecycle.database(using)
    result = PassResult()
    # Admin API §12.1: maintenance mode pauses scheduled promotion and cron triggers (an
    # entry whose slots passed meanwhile fires once when it is off, its cron.triggered
    # event counting the slots missed).
    paused = lifecycle.in_maintenance(using=using)
    # Cron needs no leader: each slot is taken with a compare-and-set (lifecycle/cron.py),
    # so every reaper and worker evaluates, and a dead one loses no slot.
    if not paused:
        result.cron_fired, result.cron_skipped = lifecycle.fire_due_cron(using=using)
    # Webhooks need no leader either: one dispatcher at a time moves the event cursor.
    try:
        result.webhooks = lifecycle.dispatch_webhooks(using=using)
    except Exception as exc:
        if resilience.is_connection_error(exc):
            raise
        # Logged, and the rest of the pass goes on: promotions must not wait on webhooks.
        logger.exception("webhook dispatch failed; the next pass tries again")
    # First, so that this pass's statements and the workers' next claims are planned on
    # statistics of the table as it is.
    with lifecycle.lead(LOCK_NAME, using=using) as leader:
        if leader:
            result.analyzed = lifecycle.refresh_statistics(using=using)
    # Noisy neighbours (multi-tenancy §9.2, OJS_TENANT_THROTTLING): ended throttles are
    # lifted every pass; detection runs every OJS_TENANT_THROTTLING["every"] seconds.
    with lifecycle.lead(LOCK_NAME, using=using) as leader:
        if leader:
            result.throttled = lifecycle.detect_noisy_neighbours(using=using)
    if result.throttled:
        logger.info("throttled noisy tenants: %s", result.throttled)
    if result.analyzed:
        logger.info(
            "analysed %s: twice the rows it held at its last analysis, or more",
            ", ".join(result.analyzed),
        )
    steps = [
        *([] if paused else [("promoted", lifecycle.promote_due)]),
        ("expired", lifecycle.expire_stale),
        ("rescued", lifecycle.rescue_expired),
        ("recovered", lifecycle.recover_dead_workers),
    ]
    for name, step in steps:
        total = 0
        while True:
            # Each batch commits on its own, so a promoted job is claimable at once and
            # no row stays locked for the whole pass. The leadership lock is taken per
            # transaction: another reaper that holds it now does this batch instead.
            with lifecycle.lead(LOCK_NAME, using=using) as leader:
                if not leader:
                    # Another reaper leads now: report what this one did before that.
                    result.leader = bool(result.moved or total)
                    setattr(result, name, total)
                    return result
                moved = step(using=using)
            total += moved
            if moved < lifecycle.MAINTENANCE_BATCH:
                break
        setattr(result, name, total)
    if prune:
        result.pruned = prune_expired(using=using)
    return result


#: Rows of each kind deleted per prune transaction.
PRUNE_BATCH = 5_000
#: Prune transactions per pass at most: the rest waits for the next pass, so a backlog
#: of millions never holds up promotions and rescues for long.
PRUNE_BATCHES_PER_PASS = 20


def retention_cutoffs(now: datetime) -> dict[str, datetime | None]:
    """``OJS_RETENTION`` as the times before which each kind may go (None: kept)."""
    retention = settings.RETENTION
    kinds = ("completed", "cancelled", "discarded", "dead_letter", "events", "workflows")
    return {
        f"{kind}_before": None
        if retention.get(kind) is None
        else now - timedelta(seconds=retention[kind] or 0)
        for kind in kinds
    }


def queue_cutoffs(now: datetime, *, using: str | None = None) -> dict[str, dict[str, datetime]]:
    """The queues' own retention (queue config §6.3) as their cut-offs, by queue."""
    return {
        queue: {f"{kind}_before": now - timedelta(seconds=seconds) for kind, seconds in own.items()}
        for queue, own in lifecycle.queue_retention(using=using).items()
    }


def maintain_partitions(*, now: datetime | None = None, using: str | None = None) -> dict[str, int]:
    """Create the periods ahead and drop expired ones on partitioned tables (PostgreSQL)."""
    now = now or timezone.now()
    cutoffs = retention_cutoffs(now)
    cutoffs.pop("workflows_before")
    return lifecycle.maintain_partitions(
        premake=settings.PARTITION_PREMAKE,
        now=now,
        queues=queue_cutoffs(now, using=using),
        using=using,
        **cutoffs,
    )


def prune_expired(*, using: str | None = None) -> dict[str, int]:
    """Delete what is older than ``OJS_RETENTION`` allows, in short transactions.

    A queue with its own retention (``lifecycle.set_queue_retention``, queue config §6.3)
    has its jobs of those kinds pruned by it instead. Each transaction deletes at most
    ``PRUNE_BATCH`` rows of each kind, under the reaper's leader lock (one pruner at a
    time), and commits: no long transaction holds back vacuum or, on SQLite, the write
    lock that claims and pushes need.
    """
    now = timezone.now()
    cutoffs = retention_cutoffs(now)
    workflows_before = cutoffs.pop("workflows_before")
    queues = queue_cutoffs(now, using=using)
    # Partitioned tables (PostgreSQL, optional): whole expired periods go first, as one
    # DROP TABLE each; the batches below delete what is left row by row.
    done = maintain_partitions(now=now, using=using)
    out = {f"partitions_{kind}": n for kind, n in done.items() if n}
    for _ in range(PRUNE_BATCHES_PER_PASS):
        with lifecycle.lead(LOCK_NAME, using=using) as leader:
            if not leader:
                break
            batch = lifecycle.prune(
                **cutoffs,
                workflows_before=workflows_before,
                queues=queues,
                limit=PRUNE_BATCH,
                using=using,
            )
        for kind, n in batch.items():
            out[kind] = out.get(kind, 0) + n
        if all(n < PRUNE_BATCH for kind, n in batch.items() if kind != "workflows"):
            break
    with lifecycle.lead(LOCK_NAME, using=using) as leader:
        if leader:
            out["results"] = lifecycle.prune_results(now, using=using)
            # Bulk operations §10.2: answers to idempotency keys are kept 24 h.
            out["idempotency_keys"] = lifecycle.prune_idempotency_keys(now=now, using=using)
    return out


def run(
    *,
    interval: float | None = None,
    prune_interval: float | None = None,
    stop: threading.Event | None = None,
    using: str | None = None,
) -> None:
    """Run passes every ``interval`` seconds until ``stop`` is set."""
    interval = settings.REAPER_INTERVAL if interval is None else interval
    prune_interval = settings.PRUNE_INTERVAL if prune_interval is None else prune_interval
    stop = stop or threading.Event()
    outage = resilience.Outage("reaper", logger, using=lifecycle.database(using))
    next_prune = time.monotonic() + min(prune_interval, 5.0)
    _sync_cron(using, stop, outage)
    logger.info("reaper started (every %.2fs, prune every %.0fs)", interval, prune_interval)
    while not stop.is_set():
        resilience.drop_broken_connection(lifecycle.database(using))
        do_prune = time.monotonic() >= next_prune
        try:
            result = run_once(prune=do_prune, using=using)
        except Exception as exc:
            if resilience.is_connection_error(exc):
                # Logged once per outage; the next pass after a back-off delay.
                stop.wait(outage.failed(exc))
                continue
            logger.exception("reaper pass failed; retrying in %.2fs", interval)
        else:
            outage.succeeded()
            if do_prune:
                next_prune = time.monotonic() + prune_interval
            if result.moved or result.cron_fired or result.webhooks or any(result.pruned.values()):
                logger.info(
                    "reaper: promoted=%d expired=%d rescued=%d recovered=%d cron=%d "
                    "webhooks=%d pruned=%s",
                    result.promoted,
                    result.expired,
                    result.rescued,
                    result.recovered,
                    result.cron_fired,
                    result.webhooks,
                    result.pruned,
                )
        stop.wait(interval)
    logger.info("reaper stopped")


def _sync_cron(using: str | None, stop: threading.Event, outage: resilience.Outage) -> None:
    """Store the cron jobs declared in code and settings, and the tenants configured in
    settings, retrying while the database is away."""
    while not stop.is_set():
        try:
            counts = lifecycle.sync_cron(using=using)
            tenants = lifecycle.sync_tenants(using=using)  # OJS_TENANTS
        except Exception as exc:
            if not resilience.is_connection_error(exc):
                raise  # a declared cron job is invalid: fail at startup, loudly
            stop.wait(outage.failed(exc))
            continue
        outage.succeeded()
        if any(counts.values()):
            logger.info("cron jobs declared in code and settings: %s", counts)
        if tenants:
            logger.info("tenants configured in OJS_TENANTS stored: %s", ", ".join(tenants))
        return
