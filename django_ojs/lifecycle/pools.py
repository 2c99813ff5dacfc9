"""Worker pools (OJS fair scheduling §6-§8): their rows, and fetches that choose among a
pool's queues.

A pool's fetch asks ``django_ojs.scheduling`` which queues to claim from and how many jobs
from each, then claims with the one fetch path (:class:`~django_ojs.lifecycle.claim.Fetch`,
one queue at a time), so every claim is the usual atomic statement (§5.1): weighting is
the choice of queues, not a different claim. Each process keeps the scheduling state of
the pools its fetches served (:func:`scheduler_for`); a pool's row is read again at most
every :data:`REFRESH_SECONDS`, and at once in the process that changed it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Min, Sum
from django.utils import timezone

from django_ojs import counters, scheduling
from django_ojs.actors import Actor
from django_ojs.drivers import get_driver
from django_ojs.exceptions import PoolNotFound, ValidationError
from django_ojs.lifecycle import audit, events, isolation
from django_ojs.lifecycle.claim import Fetch
from django_ojs.lifecycle.store import db
from django_ojs.lifecycle.system import in_maintenance
from django_ojs.lifecycle.workers import join_pool, stale_before, stopping
from django_ojs.models import Event, Job, Worker, WorkerPool
from django_ojs.policy import configured
from django_ojs.states import JobState
from django_ojs.validation import (
    check_int,
    duration_ms,
    validate_pool_name,
    validate_worker_id,
)

#: A pool's row is read again after this many seconds (changes made in this process are
#: seen at once).
REFRESH_SECONDS = 1.0
#: ``ojs_worker --pool`` takes these values as its execution model (threads or child
#: processes, the flag's older meaning): no worker pool has these names.
RESERVED_NAMES = ("threads", "processes")
#: Prefix of the lock a pool with a concurrency limit takes around its fetches.
POOL_LOCK_PREFIX = "ojs.pool:"


def policy_of(pool: WorkerPool) -> scheduling.Policy:
    return scheduling.Policy(
        tuple(pool.queues),
        pool.strategy,
        dict(pool.weights or {}),
        scheduling.Starvation(
            pool.starvation_enabled, pool.rotation_interval, pool.min_dispatch_ratio
        ),
    )


def save_pool(
    name: str,
    queues: Any,
    *,
    strategy: Any = None,
    weights: Any = None,
    concurrency: Any = None,
    starvation: Any = None,
    isolated: Any = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> tuple[WorkerPool, bool]:
    """Create or replace the pool ``name`` (§10.1 ``PUT``); returns it and whether it is new.

    ``queues`` is an array (with ``weights``, §6.1) or an object of queue → ``{weight}``;
    ``starvation`` §8.1's ``starvation_prevention`` object; ``isolated`` (§6.3) keeps the
    pool's queues to its own workers. A field left out takes its default. Emits ``scheduling.rebalanced`` (§11.1) when an existing pool's strategy or
    weights change.
    """
    using = db(using)
    name = validate_pool_name(name, field="name")
    if name in RESERVED_NAMES:
        raise ValidationError(
            f"'{name}' is reserved (ojs_worker --pool {name} chooses the execution model)",
            field="name",
        )
    rules = scheduling.policy(queues, strategy=strategy, weights=weights, starvation=starvation)
    if concurrency is not None:
        concurrency = check_int(concurrency, "concurrency", minimum=1)
    if isolated is None:
        isolated = False
    elif not isinstance(isolated, bool):
        raise ValidationError("isolated must be true or false", field="isolated")
    now = timezone.now()
    fields = {
        "queues": list(rules.queues),
        "strategy": rules.strategy,
        "weights": dict(rules.weights),
        "concurrency": concurrency,
        "starvation_enabled": rules.starvation.enabled,
        "rotation_interval": rules.starvation.rotation_interval,
        "min_dispatch_ratio": rules.starvation.min_dispatch_ratio,
        "isolated": isolated,
        "updated_at": now,
    }
    with transaction.atomic(using=using):
        pools = WorkerPool.objects.using(using)
        pool = pools.select_for_update().filter(name=name).first()
        created = False
        if pool is None:
            try:
                with transaction.atomic(using=using):
                    pool = pools.create(name=name, created_at=now, **fields)
                created = True
            except IntegrityError:  # created meanwhile by a concurrent save: replace it
                pool = pools.select_for_update().get(name=name)
        if not created:
            previous = (pool.strategy, pool.weights)
            for key, value in fields.items():
                setattr(pool, key, value)
            pool.save(using=using)
            if previous != (pool.strategy, pool.weights):
                events.emit_other(
                    "scheduling.rebalanced", name, using, pool=name,
                    previous_strategy=previous[0], new_strategy=pool.strategy,
                    weights=pool.weights or None,
                )  # fmt: skip
        audit.record(actor, "pool.saved", using, pool=name)
        forget(name, using)
        transaction.on_commit(lambda: forget(name, using), using=using)
    return pool, created


def delete_pool(name: str, *, actor: Actor | None = None, using: str | None = None) -> None:
    """Remove the pool ``name``. Its workers' next fetches fail with ``PoolNotFound``;
    their rows keep the name until they register again."""
    using = db(using)
    with transaction.atomic(using=using):
        deleted, _ = WorkerPool.objects.using(using).filter(name=name).delete()
        if not deleted:
            raise PoolNotFound(name)
        audit.record(actor, "pool.deleted", using, pool=name)
        forget(name, using)
        transaction.on_commit(lambda: forget(name, using), using=using)


def get_pool(name: str, *, using: str | None = None) -> WorkerPool:
    pool = WorkerPool.objects.using(db(using)).filter(name=name).first()
    if pool is None:
        raise PoolNotFound(name)
    return pool


# ------------------------------------------------------------------ per-process state


@dataclass
class _Known:
    pool: WorkerPool
    scheduler: scheduling.Scheduler
    read_at: float


_known: dict[tuple[str, str], _Known] = {}
_known_lock = threading.Lock()
#: When each (database, worker, pool) membership was last recorded by this process.
_joined: dict[tuple[str, str, str], float] = {}
_clock = time.monotonic


def forget(name: str | None = None, using: str | None = None) -> None:
    """Drop this process's state of the pool ``name`` (every pool and every worker's own
    strategy: ``None``): its row is read again, and its scheduling starts afresh."""
    isolation.forget(using)
    with _known_lock:
        for key in list(_known):
            if (name is None or key[1] == name) and (using is None or key[0] == using):
                del _known[key]
        if name is None:
            _adhoc.clear()
            _joined.clear()


def scheduler_for(name: str, using: str) -> tuple[WorkerPool, scheduling.Scheduler]:
    """The pool's row (read at most every :data:`REFRESH_SECONDS`) and this process's
    scheduler for it: kept while the pool's policy stays the same, so that its credits
    carry over from fetch to fetch."""
    key = (using, name)
    now = _clock()
    with _known_lock:
        known = _known.get(key)
        if known is not None and now - known.read_at < REFRESH_SECONDS:
            return known.pool, known.scheduler
    pool = get_pool(name, using=using)
    rules = policy_of(pool)
    with _known_lock:
        known = _known.get(key)
        if known is not None and known.scheduler.policy == rules:
            known.pool, known.read_at = pool, now
        else:
            if len(_known) >= 1024:  # pool names come from clients: never grow unbounded
                _known.clear()
            known = _known[key] = _Known(pool, scheduling.Scheduler(rules), now)
        return known.pool, known.scheduler


# ------------------------------------------------------------------------- fetching


class PoolFetch:
    """FETCH for a member of the pool ``pool`` (fair scheduling §5.2, §6-§8): the pool's
    queues, in the order and amounts its strategy chooses.

    ``PoolFetch(pool, ...)(count)`` claims up to ``count`` jobs, like
    :class:`~django_ojs.lifecycle.claim.Fetch`. With ``register`` (HTTP workers), the
    worker's row records its pool (§6.2: declared by its first contact) and a quiet
    worker gets nothing.
    """

    def __init__(
        self,
        pool: str,
        *,
        worker_id: str | None = None,
        visibility_timeout: float | timedelta | None = None,
        fields: Sequence[str] | None = None,
        register: bool = True,
        using: str | None = None,
        tenants: Sequence[str] | None = None,
    ):
        self.using = db(using)
        self.name = validate_pool_name(pool)
        #: Claim only these tenants' jobs (``None``: any job), as ``fetch(tenants=...)``.
        self.tenants = tenants
        self.worker_id = validate_worker_id(worker_id)
        self.visibility_timeout = visibility_timeout
        duration_ms(visibility_timeout, "visibility_timeout")  # validated once, here
        self.fields = fields
        self.register = register
        self.defaults = configured()
        self.fetches: dict[str, Fetch] = {}
        self.pool, _ = scheduler_for(self.name, self.using)  # PoolNotFound at once

    @property
    def queues(self) -> list[str]:
        """The pool's queues, as last read."""
        return list(self.pool.queues)

    def fetch_of(self, queue: str) -> Fetch:
        found = self.fetches.get(queue)
        if found is None:
            found = self.fetches[queue] = Fetch(
                [queue], worker_id=self.worker_id, visibility_timeout=self.visibility_timeout,
                fields=self.fields, register=False, using=self.using, tenants=self.tenants,
                pool=self.name,
            )  # fmt: skip
        return found

    def __call__(self, count: int) -> list[Job]:
        using, worker_id = self.using, self.worker_id
        self.pool, scheduler = scheduler_for(self.name, using)
        if in_maintenance(using=using):
            return []
        if worker_id and self.register:
            if stopping(worker_id, using):
                return []  # graceful shutdown §5.1
            self._join()
        pool = self.pool
        if pool.strategy == scheduling.LEAST_LOADED and worker_id and self.register:
            count = min(count, self._capacity(worker_id))
        if count <= 0:
            return []
        if pool.concurrency is None:
            return self._claim(scheduler, count)
        with transaction.atomic(using=using):
            # A pool-wide limit counts its members' active jobs: its fetches take turns.
            get_driver(using).lock_keys([POOL_LOCK_PREFIX + pool.name])
            active = pool_active_jobs(pool.name, using)
            room = pool.concurrency - active
            self._report_load(pool, active, full=room <= 0)
            return self._claim(scheduler, min(count, room)) if room > 0 else []

    def _report_load(self, pool: WorkerPool, active: int, *, full: bool) -> None:
        """§11.1 ``scheduling.pool_overloaded`` when every slot of the pool's limit is taken
        while its queues have jobs waiting: once per change (the pool's
        ``overloaded_since``, set and cleared under the pool's lock), not once per fetch.
        Costs a statement only when the state, as last read, changes."""
        using = self.using
        rows = WorkerPool.objects.using(using).filter(name=pool.name)
        if not full:
            if pool.overloaded_since is not None:
                rows.filter(overloaded_since__isnull=False).update(overloaded_since=None)
                pool.overloaded_since = None
            return
        if pool.overloaded_since is not None:
            return
        waiting = sum(available_by_queue(pool.queues, using).values())
        if not waiting:
            return  # full, but holding nothing back
        now = timezone.now()
        if rows.filter(overloaded_since__isnull=True).update(overloaded_since=now):
            events.emit_other(
                "scheduling.pool_overloaded", pool.name, using, pool=pool.name,
                active_jobs=active, waiting_jobs=waiting, concurrency=pool.concurrency,
            )  # fmt: skip
        pool.overloaded_since = now  # this process's copy, until the row is read again

    def _join(self) -> None:
        """Record the worker's membership (and sign of life) at most once a
        :data:`REFRESH_SECONDS` per process: an HTTP worker polls in a loop."""
        assert self.worker_id
        key = (self.using, self.worker_id, self.name)
        now = _clock()
        last = _joined.get(key)
        if last is not None and now - last < REFRESH_SECONDS:
            return
        join_pool(self.worker_id, self.name, self.pool.queues, using=self.using)
        if len(_joined) >= 4096:  # worker ids come from clients
            _joined.clear()
        _joined[key] = now

    def _capacity(self, worker_id: str) -> int:
        """§7.2: what the worker may still take (its concurrency less its active jobs)."""
        limit = (
            Worker.objects.using(self.using)
            .filter(id=worker_id)
            .values_list("concurrency", flat=True)
            .first()
        )
        if not limit:
            return 1_000_000
        active = Job.objects.using(self.using).filter(state=JobState.ACTIVE, worker_id=worker_id)
        return limit - active.count()

    def _claim(self, scheduler: scheduling.Scheduler, count: int) -> list[Job]:
        jobs = claim_planned(scheduler, count, self.fetch_of, self.using)
        if scheduler.starved:
            served: dict[str, int] = {}
            for job in jobs:
                served[job.queue] = served.get(job.queue, 0) + 1
            for queue, seconds in scheduler.take_starved(served).items():
                # §11.1: a queue that got no dispatch for more than the rotation interval.
                waiting = available_by_queue([queue], self.using).get(queue, 0)
                counters.starved(queue)
                events.emit_other(
                    "scheduling.queue_starved", queue, self.using, queue=queue,
                    pool=self.name, duration=scheduling.iso_seconds(round(seconds, 3)),
                    available_count=waiting + served[queue],
                )  # fmt: skip
        return jobs


def claim_planned(
    scheduler: scheduling.Scheduler, count: int, fetch_of: Any, using: str
) -> list[Job]:
    """Claim up to ``count`` jobs as ``scheduler`` plans, one queue's claim at a time
    (``fetch_of(queue)`` is that queue's :class:`Fetch`), and tell it what each got."""
    rules = scheduler.policy
    backlog = None
    if rules.strategy == scheduling.LEAST_LOADED:
        backlog = available_by_queue(rules.queues, using)
    claimed: list[Job] = []
    got: dict[str, int] = {}
    empty: list[str] = []

    def take(queue: str, n: int) -> None:
        jobs = fetch_of(queue)(n)
        claimed.extend(jobs)
        got[queue] = got.get(queue, 0) + len(jobs)
        if len(jobs) < n:
            empty.append(queue)

    for queue, n in scheduler.plan(count, backlog):
        take(queue, n)
    # Work-conserving: a queue short of its share leaves it to the others.
    for queue in scheduler.fallback(backlog):
        if len(claimed) >= count:
            break
        if queue not in empty:
            take(queue, count - len(claimed))
    scheduler.record(got, empty)
    return claimed


#: Schedulers of fetches that bring their own strategy (§5.2), per (database, worker,
#: policy), in this process.
_adhoc: dict[tuple[Any, ...], scheduling.Scheduler] = {}


def fetch_with_policy(
    rules: scheduling.Policy,
    count: int = 1,
    *,
    worker_id: str | None = None,
    visibility_timeout: float | timedelta | None = None,
    using: str | None = None,
    tenants: Sequence[str] | None = None,
) -> list[Job]:
    """FETCH with the worker's own ``strategy`` and ``weights`` (§5.2: "workers MAY
    specify their queue preferences in the FETCH request"), for a worker in no pool;
    ``tenants`` as for :func:`~django_ojs.lifecycle.claim.fetch`."""
    using = db(using)
    if in_maintenance(using=using):
        return []
    if worker_id and stopping(worker_id, using):
        return []  # graceful shutdown §5.1, whichever queue would be asked first
    weights = tuple(sorted(rules.weights.items()))
    key = (using, worker_id or "", rules.queues, rules.strategy, weights, rules.starvation)
    with _known_lock:
        scheduler = _adhoc.get(key)
        if scheduler is None:
            if len(_adhoc) >= 4096:
                _adhoc.clear()
            scheduler = _adhoc[key] = scheduling.Scheduler(rules)
    fetches: dict[str, Fetch] = {}
    registered = False

    def fetch_of(queue: str) -> Fetch:
        nonlocal registered
        if queue not in fetches:
            # The first claim records the worker's sign of life, as a plain fetch does.
            fetches[queue] = Fetch(
                [queue], worker_id=worker_id, visibility_timeout=visibility_timeout,
                register=not registered, using=using, tenants=tenants,
            )  # fmt: skip
            registered = True
        return fetches[queue]

    return claim_planned(scheduler, count, fetch_of, using)


def pool_fetch(
    pool: str,
    count: int = 1,
    *,
    worker_id: str | None = None,
    visibility_timeout: float | timedelta | None = None,
    using: str | None = None,
) -> list[Job]:
    """One FETCH by a member of ``pool`` (an HTTP worker naming its pool)."""
    return PoolFetch(pool, worker_id=worker_id, visibility_timeout=visibility_timeout, using=using)(
        count
    )


# ---------------------------------------------------------------------------- reads


def pool_active_jobs(name: str, using: str) -> int:
    """Jobs active now in the hands of the pool's workers."""
    members = Worker.objects.using(using).filter(pool=name).values("id")
    return Job.objects.using(using).filter(state=JobState.ACTIVE, worker_id__in=members).count()


def available_by_queue(queues: Sequence[str], using: str) -> dict[str, int]:
    return dict(
        Job.objects.using(using)
        .filter(state=JobState.AVAILABLE, queue__in=list(queues))
        .values_list("queue")
        .annotate(n=Count("id"))
        .order_by()
    )


def pool_summaries(using: str | None = None) -> list[dict[str, Any]]:
    """Every pool with its live figures: workers (heartbeat within
    ``OJS_WORKER_STALE_AFTER``) and active jobs (§10.1)."""
    using = db(using)
    fresh = stale_before(timezone.now())
    pools = list(WorkerPool.objects.using(using).order_by("name"))
    workers = dict(
        Worker.objects.using(using)
        .filter(pool__in=[p.name for p in pools], last_heartbeat_at__gte=fresh)
        .values_list("pool")
        .annotate(n=Count("id"))
        .order_by()
    )
    return [
        {"pool": p, "active_workers": workers.get(p.name, 0),
         "active_jobs": pool_active_jobs(p.name, using)}
        for p in pools
    ]  # fmt: skip


def pool_loads(using: str | None = None) -> list[tuple[str, int, int | None]]:
    """Every pool's name, its members' active jobs and its capacity (§11.2
    ``pool_utilization``): its concurrency limit, else the sum of the concurrency of its
    live workers (heartbeat within ``OJS_WORKER_STALE_AFTER``), else ``None``. Three
    statements, whatever the number of pools."""
    using = db(using)
    pools = list(
        WorkerPool.objects.using(using).order_by("name").values_list("name", "concurrency")
    )
    if not pools:
        return []
    members = Worker.objects.using(using).filter(pool__in=[name for name, _ in pools])
    pool_of = dict(members.values_list("id", "pool"))
    fresh = stale_before(timezone.now())
    slots = dict(
        members.filter(last_heartbeat_at__gte=fresh)
        .values_list("pool")
        .annotate(n=Sum("concurrency"))
        .order_by()
    )
    active: dict[str, int] = {}
    if pool_of:
        for worker_id, n in (
            Job.objects.using(using)
            .filter(state=JobState.ACTIVE, worker_id__in=list(pool_of))
            .values_list("worker_id")
            .annotate(n=Count("id"))
            .order_by()
        ):
            name = pool_of[worker_id]
            active[name] = active.get(name, 0) + n
    return [(name, active.get(name, 0), limit or slots.get(name) or None) for name, limit in pools]


#: The window of the scheduling statistics (§10.2).
STATS_WINDOW = timedelta(minutes=1)
#: At most this many of the window's dispatches are read for the average wait.
WAIT_SAMPLE = 1000


def scheduling_stats(using: str | None = None) -> dict[str, Any]:
    """§10.2's figures per queue over the last minute: dispatches (``job.started`` events,
    so only while ``OJS_STORE_EVENTS`` is on), their share, the average wait of a sample
    of them, active and available jobs; ``starved`` when a queue has had jobs waiting
    since before the window and got no dispatch in it. The queues are the pools' and any
    queue dispatched from in the window."""
    using = db(using)
    now = timezone.now()
    since = now - STATS_WINDOW
    pools = list(WorkerPool.objects.using(using).order_by("name"))
    started = Event.objects.using(using).filter(type="job.started", time__gte=since)
    counts = dict(started.values_list("queue").annotate(n=Count("seq")).order_by())
    names = list(dict.fromkeys([q for p in pools for q in p.queues] + sorted(counts)))
    sample = list(started.order_by("-time").values_list("job_id", flat=True)[:WAIT_SAMPLE])
    waits: dict[str, list[float]] = {}
    for queue, enqueued, began in (
        Job.objects.using(using)
        .filter(id__in=[i for i in sample if i is not None])
        .values_list("queue", "enqueued_at", "started_at")
    ):
        if enqueued is not None and began is not None:
            waits.setdefault(queue, []).append(max((began - enqueued).total_seconds(), 0) * 1000)
    jobs = Job.objects.using(using).filter(queue__in=names)
    active = dict(
        jobs.filter(state=JobState.ACTIVE).values_list("queue").annotate(n=Count("id")).order_by()
    )
    waiting = {
        queue: (n, first)
        for queue, n, first in jobs.filter(state=JobState.AVAILABLE)
        .values_list("queue")
        .annotate(n=Count("id"), first=Min("enqueued_at"))
        .order_by()
        .values_list("queue", "n", "first")
    }
    total = sum(counts.get(q, 0) for q in names)
    rows = []
    for queue in names:
        n = counts.get(queue, 0)
        ws = waits.get(queue)
        available, first = waiting.get(queue, (0, None))
        member = [p for p in pools if queue in p.queues]
        rows.append({
            "name": queue,
            "dispatch_count_1m": n,
            "dispatch_ratio_1m": round(n / total, 4) if total else 0.0,
            "avg_wait_ms": round(sum(ws) / len(ws)) if ws else None,
            "active_jobs": active.get(queue, 0),
            "available": available,
            "pools": [p.name for p in member],
            "weights": {p.name: policy_of(p).weight(queue) for p in member},
            "starved": bool(available and not n and first is not None and first < since),
        })  # fmt: skip
    return {"queues": rows, "pools": pools, "dispatch_count_1m": total, "computed_at": now}
