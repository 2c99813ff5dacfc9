"""FETCH (OJS core §7.2, worker protocol §6): claim available jobs for a worker.

One fetch path for HTTP workers and the in-process ``ojs_worker``. The vendor-specific
statement is the driver's ``claim``; this module orders queues, records the worker's sign
of life, withholds jobs from a worker that is stopping, and emits ``job.started``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from django_ojs import counters, ratelimit
from django_ojs.conf import settings
from django_ojs.drivers import Listener, Written, get_driver
from django_ojs.lifecycle import events, isolation, tenantlimits
from django_ojs.lifecycle.maintenance import promote_due
from django_ojs.lifecycle.store import db
from django_ojs.lifecycle.system import in_maintenance
from django_ojs.lifecycle.workers import stopping
from django_ojs.models import Job, Queue, RateLimitState
from django_ojs.policy import configured
from django_ojs.states import JobState
from django_ojs.tenancy import validate_tenants
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
    register: bool = True,
    using: str | None = None,
    tenants: Sequence[str] | None = None,
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
    register:
        Create or refresh the worker's row (the default). The in-process worker registers
        when it starts and heartbeats on its own, so its fetches skip this write.
    tenants:
        Claim only jobs of these tenants (``None``: any job). Within a queue and a
        priority, the tenants whose jobs wait take turns (fair scheduling §9).
    """
    queues = validate_queues(queues)  # first, as the errors of HTTP fetches come
    count = validate_fetch_count(count)
    prepared = Fetch(
        queues, worker_id=worker_id, visibility_timeout=visibility_timeout, fields=fields,
        register=register, using=using, tenants=tenants,
    )  # fmt: skip
    return prepared(count)


class Fetch:
    """:func:`fetch` with everything but ``count`` given once: validated, and the
    configured timeouts read, when it is made (the in-process worker makes one at
    start-up and calls it for every fetch: this is its pickup path).

    ``Fetch(queues, ...)(count)`` claims as ``fetch(queues, count, ...)`` does; ``count``
    is not validated again.
    """

    def __init__(
        self,
        queues: Sequence[str],
        *,
        worker_id: str | None = None,
        visibility_timeout: float | timedelta | None = None,
        fields: Sequence[str] | None = None,
        register: bool = True,
        using: str | None = None,
        tenants: Sequence[str] | None = None,
        pool: str | None = None,
    ):
        self.using = db(using)
        #: The worker pool this fetch is made for (``PoolFetch``), or ``None``.
        self.pool = pool
        self.tenants = None if tenants is None else validate_tenants(list(tenants))
        # Keep the order, drop repeats.
        self.queues = list(dict.fromkeys(validate_queues(queues)))
        self.worker_id = validate_worker_id(worker_id)
        self.visibility_ms = duration_ms(visibility_timeout, "visibility_timeout")
        self.fields = None if fields is None else tuple(fields)
        self.register = register
        #: The configured timeouts the claims store deadlines from.
        self.defaults = configured()
        self.driver = get_driver(self.using)

    def __call__(self, count: int) -> list[Job]:
        order = self.queues
        # Fair scheduling §6.3: an isolated pool's queues go to its own workers only (a
        # per-process copy of the isolated pools, read at most once a second).
        owners = isolation.isolated_queues(self.using)
        if owners:
            order = isolation.allowed(order, self.pool, self.using)
            if not order:
                return []
        jobs = self.take(order, count)
        if jobs:
            # Fair scheduling §11.2 ``dispatch_total``, when this process serves metrics.
            counters.dispatched(jobs, self.pool or "", self.queues)
        return jobs

    def take(self, order: list[str], count: int) -> list[Job]:
        """Claim up to ``count`` jobs of the queues ``order``, in that order."""
        using, driver, worker_id = self.using, self.driver, self.worker_id
        # Admin API §12.1: maintenance mode pauses every queue (FETCH returns empty). A
        # per-process cached read (OJS_MAINTENANCE_CACHE_SECONDS), not a statement per claim.
        if in_maintenance(using=using):
            return []
        if worker_id and self.register and stopping(worker_id, using):
            return []  # graceful shutdown §5.1: no new jobs for a quiet worker
        now = timezone.now()
        claimed: list[Job] = []
        written: list[events.EventRow] = []
        # How to claim, the same for every driver call of this fetch.
        how: dict[str, Any] = {
            "worker_id": worker_id,
            "now": now,
            "visibility_ms": self.visibility_ms,
            "defaults": self.defaults,
            "fields": self.fields,
            "events": events.mode(),
            "source": settings.EVENT_SOURCE,
            "tenants": self.tenants,
            # A claim lost in a database crash leaves its job available: it is claimed
            # again, as after a worker's crash, and nothing is lost. So a fetch's own
            # transaction need not wait for its WAL to reach disk (unless
            # OJS_CLAIM_SYNCHRONOUS_COMMIT); a caller's transaction, holding who knows
            # what else, keeps its own setting.
            "durable": settings.CLAIM_SYNCHRONOUS_COMMIT or connections[using].in_atomic_block,
        }

        def claim(queue: str, limit: int, ids: Sequence[Any] | None = None) -> Written:
            return driver.claim(queue, limit, ids=ids, **how)

        # A fetch with nothing to promote and no limit to weigh: the claim is all there
        # is. One queue's claim is one atomic statement that checks this itself (and
        # records an HTTP worker's sign of life), with no transaction of its own (no
        # BEGIN and COMMIT round trips); several queues are looked at once, and their
        # claims commit together.
        touch = bool(worker_id and self.register)
        if touch and not connections[using].in_atomic_block:
            # A fetch of its own commits at once: what it records stays recorded.
            touch = _touch_due(using, worker_id)
        # Multi-tenancy §8.1: while some tenants have a max_concurrency, every claim counts
        # their active jobs (cached per process; {} when none has one).
        caps = tenantlimits.concurrency_limits(using)
        if caps:
            return self._capped(order, count, caps, how, touch)
        if len(order) == 1:
            only = driver.claim_if_clear(order[0], count, register=order if touch else None, **how)
            touch = False  # done, whatever the claim found
            if only is not None:
                events.signal(only.events, using)
                return only.jobs
        elif not touch:
            look = driver.look(order, now)
            if not (look.due or look.limited):
                with transaction.atomic(using=using):
                    for queue in order:
                        if len(claimed) >= count:
                            break
                        result = claim(queue, count - len(claimed))
                        claimed.extend(result.jobs)
                        written.extend(result.events)
                events.signal(written, using)
                return claimed
        with transaction.atomic(using=using):
            # Lazy promotion: a retry or scheduled job whose time has come is fetchable
            # now, not only after the reaper's next pass (a backoff is a minimum wait,
            # retry §5). It waits for a promotion the reaper has in flight (the reaper
            # only ever skips locked rows, so it never waits on us): each statement below
            # then sees it.
            promote_due(now=now, queues=order, wait=True, using=using)
            if touch and worker_id:
                driver.touch_worker(worker_id, order, now)
            for queue in order:
                remaining = count - len(claimed)
                if remaining <= 0:
                    break
                # The driver claims and writes the job.started events in one statement.
                result = claim(queue, remaining)
                claimed.extend(result.jobs)
                written.extend(result.events)
                remaining = count - len(claimed)
                if remaining > 0:
                    # Rate-limited jobs (rate-limiting §8.1): those whose key allows a
                    # start.
                    ids = _limited(queue, remaining, now, using)
                    if ids:
                        result = claim(queue, len(ids), ids=ids)
                        claimed.extend(result.jobs)
                        written.extend(result.events)
            events.signal(written, using)
        return claimed

    def _capped(
        self,
        order: list[str],
        count: int,
        caps: dict[str, int],
        how: dict[str, Any],
        touch: bool,
    ) -> list[Job]:
        """A fetch while some tenants have a ``max_concurrency``: in claim order, each of
        those tenants' jobs only while it has room (``lifecycle.tenantlimits``). The
        tenants a claim would take are locked and their active jobs counted first, so a
        cap holds under any number of concurrent fetches; the jobs of tenants at their
        cap are left out of the scan, which reads at most :data:`CAPPED_WINDOW` rows
        past them."""
        using, driver, worker_id, now = self.using, self.driver, self.worker_id, how["now"]
        claimed: list[Job] = []
        written: list[events.EventRow] = []
        with transaction.atomic(using=using):
            promote_due(now=now, queues=order, wait=True, using=using)
            if touch and worker_id:
                driver.touch_worker(worker_id, order, now)
            for queue in order:
                remaining = count - len(claimed)
                if remaining <= 0:
                    break
                candidates = driver.capped_candidates(
                    queue, now, remaining + len(caps), window=CAPPED_WINDOW + remaining,
                    caps=caps, tenants=self.tenants,
                )  # fmt: skip
                allowed = tenantlimits.allowance((t for _, t in candidates), caps, using)
                ids = _within(candidates, allowed, remaining)
                if ids:
                    result = driver.claim(queue, len(ids), ids=ids, **how)
                    claimed.extend(result.jobs)
                    written.extend(result.events)
                remaining = count - len(claimed)
                if remaining > 0:
                    ids = _limited(queue, remaining, now, using, caps=caps)
                    if ids:
                        result = driver.claim(queue, len(ids), ids=ids, **how)
                        claimed.extend(result.jobs)
                        written.extend(result.events)
            events.signal(written, using)
        return claimed


#: How many rows past the jobs of tenants at their cap a claim reads at most (per queue).
#: Within a priority, fair claims interleave the tenants' jobs, so a capped tenant's
#: backlog is not in front of the others' unless nothing else waits (or fairness is off).
CAPPED_WINDOW = 1000


def _within(candidates: Sequence[tuple[Any, str]], allowed: dict[str, int], n: int) -> list[Any]:
    """The ids of up to ``n`` of ``candidates``, in order, each capped tenant's only while
    its allowance lasts (``allowed`` is spent)."""
    chosen: list[Any] = []
    for job_id, tenant in candidates:
        if len(chosen) >= n:
            break
        if tenant in allowed:
            if allowed[tenant] <= 0:
                continue
            allowed[tenant] -= 1
        chosen.append(job_id)
    return chosen


#: An HTTP worker's fetches record its sign of life (its row's ``last_heartbeat_at``; the
#: first creates the row) at most this often per web process: a worker fetching in a loop
#: wrote its row on every request, for a heartbeat that is stale only after
#: ``OJS_WORKER_STALE_AFTER``.
TOUCH_EVERY = 1.0
#: When each (database, worker) was last recorded here, on ``_clock``.
_touched: dict[tuple[str, str], float] = {}
_clock = time.monotonic


def _touch_due(using: str, worker_id: str | None) -> bool:
    """Whether this fetch records the worker's sign of life (and notes that it does):
    its first fetch here does (creating its row), then one a :data:`TOUCH_EVERY`. For
    fetches outside a transaction only: one inside may be rolled back with its caller's."""
    key = (using, worker_id or "")
    now = _clock()
    last = _touched.get(key)
    if last is not None and now - last < TOUCH_EVERY:
        return False
    if len(_touched) >= 4096:  # worker ids come from clients: never grow without bound
        _touched.clear()
    _touched[key] = now
    return True


def _limited(
    queue: str, limit: int, now: datetime, using: str, *, caps: dict[str, int] | None = None
) -> list[Any]:
    """Ids of up to ``limit`` jobs of ``queue`` that its limits and their keys allow now.

    Looked at only when the one-statement claim left room: rate-limited jobs, and every
    job of a queue with a queue-level limit (``Queue.limits``, rate-limiting §7.2). Each
    key (and the queue) is locked first (``Driver.lock_keys``, until the fetch's
    transaction ends), so claims from any process count active jobs and recent starts one
    after the other: a limit is never exceeded (§6.2). Jobs held back stay ``available``
    and are skipped (``on_limit: wait``, §8.1); both limits apply when both exist (§7.2).
    """
    # One statement when there is nothing to do (an idle worker's poll): rate-limited jobs,
    # or any job when the queue has a queue-level limit.
    candidates = get_driver(using).limited_candidates(queue, now, max(limit * 4, 50))
    if not candidates:
        return []
    queue_limits = (
        Queue.objects.using(using)
        .filter(name=queue, limits__isnull=False)
        .values_list("limits", flat=True)
        .first()
    )
    rules: dict[str, ratelimit.RateLimit] = {}
    for _, key, wire, _ in candidates:
        if key is not None and key not in rules and isinstance(wire, dict):
            rules[key] = ratelimit.from_wire(wire)
    locks = [RATE_LOCK_PREFIX + key for key in rules]
    if queue_limits:
        locks.append(QUEUE_LOCK_PREFIX + queue)
    get_driver(using).lock_keys(locks)
    states = {s.key: s for s in RateLimitState.objects.using(using).filter(key__in=list(rules))}
    for key, state in states.items():
        if state.override and (state.override_until is None or state.override_until > now):
            rules[key] = ratelimit.overridden(rules[key], state.override)
    budget = limit
    if queue_limits and queue_limits.get("concurrency") is not None:
        active = Job.objects.using(using).filter(state=JobState.ACTIVE, queue=queue).count()
        budget = min(budget, max(queue_limits["concurrency"] - active, 0))
    usages = {key: usage_of(key, rule, now, using)[0] for key, rule in rules.items()}
    allowed = {key: ratelimit.allowance(rules[key], usages[key], now) for key in rules}
    # Tenants' max_concurrency (lifecycle.tenantlimits) applies on top.
    room = tenantlimits.allowance((c[3] for c in candidates), caps or {}, using)
    chosen: list[Any] = []
    first: dict[str, Any] = {}
    for job_id, key, _, tenant in candidates:
        if len(chosen) >= budget:
            break
        if tenant in room and room[tenant] <= 0:
            continue
        if key is not None and key in allowed:
            if allowed[key] <= 0:
                continue
            allowed[key] -= 1
            first.setdefault(key, job_id)
        if tenant in room:
            room[tenant] -= 1
        chosen.append(job_id)
    _report_changes(rules, usages, first, states, queue, now, using)
    return chosen


def _report_changes(
    rules: dict[str, ratelimit.RateLimit],
    usages: dict[str, ratelimit.Usage],
    started: dict[str, Any],
    known: dict[str, RateLimitState],
    queue: str,
    now: datetime,
    using: str,
) -> None:
    """Emit ``rate_limit.exceeded`` when a key starts holding jobs back, ``released`` when it
    lets one go again (rate-limiting §11.1), once per change, not once per fetch."""
    held = {key for key in rules if key not in started}
    states = RateLimitState.objects.using(using)
    was_held = {key for key, state in known.items() if state.held}
    for key in sorted(held - was_held):
        strategy, limit, current = ratelimit.binding(rules[key], usages[key], now)
        states.update_or_create(key=key, defaults={"held": True, "changed_at": now})
        events.emit_other(
            "rate_limit.exceeded", key, using, queue=queue, key=key, strategy=strategy,
            limit=limit, current=current,
        )  # fmt: skip
    for key in sorted(was_held - held):
        strategy, _, _ = ratelimit.binding(rules[key], usages[key], now)
        states.filter(key=key).update(held=False, changed_at=now)
        events.emit_other(
            "rate_limit.released", key, using, queue=queue, key=key, strategy=strategy,
            job_id=str(started[key]),
        )  # fmt: skip


#: Prefix of the lock name of a queue with queue-level limits.
QUEUE_LOCK_PREFIX = "ojs.queue:"
#: Prefix of the lock names of rate-limit keys (apart from unique-job keys).
RATE_LOCK_PREFIX = "ojs.rate:"


def usage_of(
    key: str, rule: ratelimit.RateLimit, now: datetime, using: str
) -> tuple[ratelimit.Usage, datetime | None]:
    """A key's active jobs, starts in its rate window and last start; the oldest such start."""
    jobs = Job.objects.using(using).filter(rate_key=key)
    active = jobs.filter(state=JobState.ACTIVE).count() if rule.concurrency is not None else 0
    started, oldest = 0, None
    if rule.rate is not None:
        # A sliding window over each job's latest start (a retry's start replaces the last).
        recent = jobs.filter(started_at__gt=now - rule.rate.period)
        started = recent.count()
        oldest = recent.order_by("started_at").values_list("started_at", flat=True).first()
    last = None
    if rule.throttle is not None:
        last = (
            jobs.filter(started_at__isnull=False)
            .order_by("-started_at")
            .values_list("started_at", flat=True)
            .first()
        )
    return ratelimit.Usage(active, started, last), oldest


def listen(queues: Sequence[str], *, using: str | None = None) -> Listener:
    """A new listener that wakes when work may be available in ``queues`` (one per loop).

    PostgreSQL: a dedicated ``LISTEN`` connection; SQLite: polling. Call ``wait(timeout)``,
    ``wake()`` from another thread, and ``close()`` when done.
    """
    return get_driver(db(using)).listener(list(queues))
