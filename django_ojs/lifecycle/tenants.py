"""Tenants (OJS multi-tenancy §8, §10; fair scheduling §9.2): their configuration (the
only writer of ``Tenant`` rows) and what the admin API reports of them.

A tenant exists as soon as a job names it; its row changes its fairness weight, gives it
limits (``lifecycle.tenantlimits`` applies them) or throttles it.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from django_ojs import tenantlimits as rules
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import format_timestamp
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.store import db
from django_ojs.lifecycle.tenantlimits import active_counts, forget_tenant_limits, limits_of
from django_ojs.models import Job, Tenant
from django_ojs.models.tenants import DEFAULT_WEIGHT
from django_ojs.states import JobState
from django_ojs.tenancy import validate_tenant

#: The largest weight a tenant may have (and the smallest, its inverse).
MAX_WEIGHT = 1_000_000.0
#: Counts of a tenant's jobs per state are exact up to this many, estimated above it.
EXACT_COUNT_UP_TO = 10_000
#: On a page of tenants (the admin's tenants page, ``GET /admin/tenants``), the same
#: bound: a page reads at most page size x states x this many index entries.
PAGE_EXACT_COUNT_UP_TO = 1_000


def validate_weight(value: Any, field: str = "fairness_weight") -> float:
    """A tenant's weight: a number from 1/``MAX_WEIGHT`` to ``MAX_WEIGHT``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{field} must be a positive number", field=field)
    if not 1 / MAX_WEIGHT <= value <= MAX_WEIGHT:
        raise ValidationError(
            f"{field} must be between {1 / MAX_WEIGHT:g} and {MAX_WEIGHT:g}", field=field
        )
    return float(value)


def set_tenant(
    tenant_id: str,
    *,
    weight: Any = DEFAULT_WEIGHT,
    actor: Actor | None = None,
    using: str | None = None,
) -> tuple[Tenant, bool]:
    """Create or update a tenant's configuration; ``(tenant, created)``.

    ``weight`` (fair scheduling §9.2): its share of each queue's claims against the
    other tenants with jobs waiting there. Effective for the jobs pushed from now on
    (a job's turn is fixed when it becomes available).
    """
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    weight = validate_weight(weight)
    now = timezone.now()
    with transaction.atomic(using=using):
        tenant, created = Tenant.objects.using(using).update_or_create(
            tenant_id=tenant_id,
            defaults={"weight": weight, "updated_at": now},
            create_defaults={"weight": weight, "created_at": now, "updated_at": now},
        )
        audit.record(actor, "tenant.configure", using, tenant_id=tenant_id, weight=weight)
        if created:
            events.emit_other("tenant.created", tenant_id, using, tenant_id=tenant_id)
    return tenant, created


def set_limits(
    tenant_id: str,
    limits: Any,
    *,
    reason: str = "",
    actor: Actor | None = None,
    using: str | None = None,
) -> tuple[Tenant, bool]:
    """Change a tenant's limits (multi-tenancy §8.1, §9.3); ``(tenant, created)``.

    ``limits`` names the fields it changes (``max_concurrency``, ``max_enqueue_rate``,
    ``max_queue_depth``, ``max_scheduled``, ``priority_boost``, ``quota``); ``null``
    removes one; the others keep their values. ``reason`` goes to the audit trail. The
    change applies at once in this process and within ``OJS_TENANT_LIMITS_CACHE_SECONDS``
    in the others.
    """
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    if not isinstance(reason, str) or len(reason) > 1000:
        raise ValidationError("reason must be a string of at most 1000 characters", field="reason")
    now = timezone.now()
    with transaction.atomic(using=using):
        tenant, created = (
            Tenant.objects.using(using)
            .select_for_update()
            .get_or_create(tenant_id=tenant_id, defaults={"created_at": now, "updated_at": now})
        )
        new = rules.parse(limits, limits_of(tenant))
        rate = new.enqueue_rate
        tenant.max_concurrency = new.max_concurrency
        tenant.max_queue_depth = new.max_queue_depth
        tenant.max_scheduled = new.max_scheduled
        tenant.enqueue_rate_limit = None if rate is None else rate[0]
        tenant.enqueue_rate_period_ms = None if rate is None else rate[1]
        tenant.priority_boost = new.priority_boost
        tenant.quota = new.quota
        tenant.updated_at = now
        tenant.save(using=using)
        wire = rules.wire(new)
        audit.record(
            actor, "tenant.limits", using, tenant_id=tenant_id, limits=wire, reason=reason or None
        )
        if created:
            events.emit_other("tenant.created", tenant_id, using, tenant_id=tenant_id)
    forget_tenant_limits()
    return tenant, created


def limits_wire(tenant_id: str, *, using: str | None = None) -> dict[str, Any]:
    """A tenant's limits in their §8.1 form (every field; ``null``: none)."""
    row = Tenant.objects.using(db(using)).filter(tenant_id=tenant_id).first()
    return rules.wire(rules.NONE if row is None else limits_of(row))


def delete_tenant(tenant_id: str, *, actor: Actor | None = None, using: str | None = None) -> bool:
    """Forget a tenant's configuration (its weight goes back to 1); its jobs stay."""
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    with transaction.atomic(using=using):
        deleted, _ = Tenant.objects.using(using).filter(tenant_id=tenant_id).delete()
        audit.record(actor, "tenant.delete", using, tenant_id=tenant_id, changed=bool(deleted))
    forget_tenant_limits()
    return bool(deleted)


def weight_of(tenant_id: str, *, using: str | None = None) -> float:
    found = (
        Tenant.objects.using(db(using))
        .filter(tenant_id=tenant_id)
        .values_list("weight", flat=True)
        .first()
    )
    return DEFAULT_WEIGHT if found is None else float(found)


def tenant_ids(*, after: str = "", limit: int = 100, using: str | None = None) -> list[str]:
    """The tenants named by jobs or configured, in name order after ``after``, at most
    ``limit`` (an index skip scan over the jobs' tenants: one probe per tenant)."""
    using = db(using)
    found = set(get_driver(using).distinct_tenants(after, limit))
    configured = Tenant.objects.using(using).filter(tenant_id__gt=after)
    found.update(configured.order_by("tenant_id").values_list("tenant_id", flat=True)[:limit])
    return sorted(found)[:limit]


def tenant_stats(tenant_id: str, *, using: str | None = None) -> dict[str, Any]:
    """Multi-tenancy §10.2: a tenant's jobs by state, its total and its weight.

    Counts come from ojs_job_tenant_idx; past :data:`EXACT_COUNT_UP_TO` jobs in one state
    they are the planner's estimate (``estimated`` lists those states).
    """
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    jobs = Job.objects.using(using).filter(tenant=tenant_id).exclude(tenant="")
    driver = get_driver(using)
    counts: dict[str, int] = {}
    estimated: list[str] = []
    for state in JobState:
        n, estimate = driver.count(jobs.filter(state=state.value), EXACT_COUNT_UP_TO)
        counts[state.value] = n
        if estimate:
            estimated.append(state.value)
    row = Tenant.objects.using(using).filter(tenant_id=tenant_id).first()
    weight = DEFAULT_WEIGHT if row is None else float(row.weight)
    limits = rules.NONE if row is None else limits_of(row)
    return {
        "tenant_id": tenant_id,
        "jobs": counts,
        "total_jobs": sum(counts.values()),
        "estimated": estimated,
        "fairness": {"weight": weight},
        "configured": row is not None,
        "limits": usage_of_limits(tenant_id, limits, counts, using),
    }


def usage_of_limits(
    tenant_id: str, limits: rules.Limits, counts: dict[str, int], using: str
) -> dict[str, Any]:
    """§10.2's ``limits``: each limit the tenant has, ``{"limit": n, "current": m}``."""
    out: dict[str, Any] = {}
    if limits.max_concurrency is not None:
        active = active_counts([tenant_id], using)[tenant_id]
        out["max_concurrency"] = {"limit": limits.max_concurrency, "current": active}
    if limits.max_queue_depth is not None:
        depth = counts.get("available", 0) + counts.get("scheduled", 0)
        out["max_queue_depth"] = {"limit": limits.max_queue_depth, "current": depth}
    if limits.max_scheduled is not None:
        out["max_scheduled"] = {
            "limit": limits.max_scheduled,
            "current": counts.get("scheduled", 0),
        }
    if limits.enqueue_rate is not None:
        out["max_enqueue_rate"] = rules.wire(limits)["max_enqueue_rate"]
    return out


def sync_tenants(*, using: str | None = None) -> list[str]:
    """Store the tenants configured in ``OJS_TENANTS`` (multi-tenancy §15.1: static
    configuration); the reaper does it when it starts. A tenant's weight and the limits
    named there are set; what the settings leave out (other limits, tenants not named)
    keeps its value, so the admin API's changes to those stay. Only what differs is
    written. Returns the tenants changed."""
    using = db(using)
    changed = []
    for tenant_id, (weight, limits) in sorted(rules.declared(settings.TENANTS).items()):
        row = Tenant.objects.using(using).filter(tenant_id=tenant_id).first()
        current = rules.NONE if row is None else limits_of(row)
        new_weight = (
            weight if weight is not None else (DEFAULT_WEIGHT if row is None else row.weight)
        )
        new_limits = current if limits is None else rules.parse(limits, current)
        if row is not None and row.weight == new_weight and new_limits == current:
            continue
        with transaction.atomic(using=using):
            set_tenant(tenant_id, weight=new_weight, using=using)
            if limits is not None:
                set_limits(tenant_id, limits, reason="OJS_TENANTS", using=using)
        changed.append(tenant_id)
    return changed


# -- Noisy neighbours (§9) -------------------------------------------------------------------


def throttle_tenant(
    tenant_id: str,
    *,
    weight: Any = None,
    concurrency: Any = None,
    seconds: Any = None,
    reason: str = "manual",
    actor: Actor | None = None,
    using: str | None = None,
) -> Tenant:
    """Throttle a tenant for ``seconds`` (multi-tenancy §9.2): its weight becomes
    ``weight`` (for the jobs it pushes from now on) and its jobs running at once at most
    ``concurrency``; either may be left out. Emits ``tenant.throttled``; a throttle in
    force is replaced. :func:`release_throttle` lifts it early."""
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    if weight is not None:
        weight = validate_weight(weight, field="weight")
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= rules.MAX_CONCURRENCY
    ):
        raise ValidationError(
            f"concurrency must be a whole number from 1 to {rules.MAX_CONCURRENCY}",
            field="concurrency",
        )
    if weight is None and concurrency is None:
        raise ValidationError("a throttle needs a weight or a concurrency", field="weight")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= 366 * 86400
    ):
        raise ValidationError("seconds must be a number from 0 to a year", field="seconds")
    if not isinstance(reason, str) or not 0 < len(reason) <= 255:
        raise ValidationError("reason must be a string of 1 to 255 characters", field="reason")
    now = timezone.now()
    until = now + timedelta(seconds=seconds)
    with transaction.atomic(using=using):
        tenant, created = (
            Tenant.objects.using(using)
            .select_for_update()
            .get_or_create(tenant_id=tenant_id, defaults={"created_at": now, "updated_at": now})
        )
        tenant.throttled_weight = weight
        tenant.throttled_concurrency = concurrency
        tenant.throttled_until = until
        tenant.throttle_reason = reason
        tenant.updated_at = now
        tenant.save(using=using)
        audit.record(
            actor, "tenant.throttle", using, tenant_id=tenant_id, weight=weight,
            concurrency=concurrency, until=until.isoformat(), reason=reason,
        )  # fmt: skip
        if created:
            events.emit_other("tenant.created", tenant_id, using, tenant_id=tenant_id)
        actions = [
            *(["weight_reduced"] if weight is not None else []),
            *(["concurrency_reduced"] if concurrency is not None else []),
        ]
        events.emit_other(
            "tenant.throttled", tenant_id, using, tenant_id=tenant_id, reason=reason,
            action=",".join(actions), original_weight=tenant.weight,
            effective_weight=weight, effective_concurrency=concurrency,
            until=format_timestamp(until),
        )  # fmt: skip
    forget_tenant_limits()
    return tenant


def release_throttle(
    tenant_id: str,
    *,
    reason: str = "manual",
    actor: Actor | None = None,
    using: str | None = None,
) -> bool:
    """Lift a tenant's throttle (§9.2: reversible); ``False`` if it had none. Emits
    ``tenant.throttle_released``."""
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    with transaction.atomic(using=using):
        tenant = (
            Tenant.objects.using(using)
            .select_for_update()
            .filter(tenant_id=tenant_id, throttled_until__isnull=False)
            .first()
        )
        if tenant is None:
            return False
        _release(tenant, reason, using)
        audit.record(actor, "tenant.release_throttle", using, tenant_id=tenant_id, reason=reason)
    forget_tenant_limits()
    return True


def _release(tenant: Tenant, reason: str, using: str) -> None:
    was = tenant.throttle_reason
    tenant.throttled_weight = tenant.throttled_concurrency = tenant.throttled_until = None
    tenant.throttle_reason = ""
    tenant.updated_at = timezone.now()
    tenant.save(using=using)
    events.emit_other(
        "tenant.throttle_released", tenant.tenant_id, using, tenant_id=tenant.tenant_id,
        reason=reason, throttled_for=was,
    )  # fmt: skip


def throttle_of(tenant: Tenant) -> dict[str, Any] | None:
    """A tenant's throttle in force, as the admin API shows it; ``None`` if none."""
    until = tenant.throttled_until
    if until is None or until <= timezone.now():
        return None
    return {
        "reason": tenant.throttle_reason,
        "effective_weight": tenant.throttled_weight,
        "effective_concurrency": tenant.throttled_concurrency,
        "until": format_timestamp(until),
    }


def tenant_throttle(tenant_id: str, *, using: str | None = None) -> dict[str, Any] | None:
    """:func:`throttle_of` the tenant ``tenant_id`` (``None``: not throttled)."""
    row = Tenant.objects.using(db(using)).filter(tenant_id=tenant_id).first()
    return None if row is None else throttle_of(row)


#: When each database's last detection ran (``time.monotonic``).
_detected: dict[str, float] = {}


def detect_noisy_neighbours(*, using: str | None = None, force: bool = False) -> dict[str, str]:
    """One pass of noisy-neighbour throttling (multi-tenancy §9.1-§9.2), when
    ``OJS_TENANT_THROTTLING`` is on; the reaper's leader calls it every pass, and it runs
    at most every ``every`` seconds (``force``: now). Lifts the throttles that ended,
    then throttles (or renews) the tenants found noisy. Returns ``{tenant: reason}`` of
    the tenants throttled or renewed.

    Reads each tenant's available and active jobs: one grouped read of the available
    jobs that have a tenant (along ojs_job_tenant_idx) and one of the active ones.
    """
    using = db(using)
    rules_ = rules.throttling(settings.TENANT_THROTTLING)
    now = timezone.now()
    ended = Tenant.objects.using(using).filter(throttled_until__lte=now)
    released = False
    for tenant in ended.order_by("tenant_id"):
        with transaction.atomic(using=using):
            _release(tenant, "expired", using)
        released = True
    if released:
        forget_tenant_limits()
    if rules_ is None:
        return {}
    clock = time.monotonic()
    if not force and clock - _detected.get(using, -math.inf) < rules_.every:
        return {}
    _detected[using] = clock
    jobs = Job.objects.using(using).exclude(tenant="").order_by()
    depths = dict(
        jobs.filter(state=JobState.AVAILABLE).values("tenant").annotate(n=Count("id"))
        .values_list("tenant", "n")
    )  # fmt: skip
    actives = dict(
        jobs.filter(state=JobState.ACTIVE).values("tenant").annotate(n=Count("id"))
        .values_list("tenant", "n")
    )  # fmt: skip
    total_active = Job.objects.using(using).filter(state=JobState.ACTIVE).count()
    found = rules.noisy(depths, actives, total_active, rules_)
    rows = {t.tenant_id: t for t in Tenant.objects.using(using).filter(tenant_id__in=list(found))}
    out = {}
    for tenant_id, why in sorted(found.items()):
        row = rows.get(tenant_id)
        base = DEFAULT_WEIGHT if row is None else float(row.weight)
        current = None if row is None else throttle_of(row)
        if current is not None and current["reason"].startswith("manual"):
            continue  # an operator's throttle stays as they set it
        weight = max(base * rules_.weight_factor, 1 / MAX_WEIGHT) if why.weight else None
        if current is not None and (weight, why.concurrency) == (
            current["effective_weight"],
            current["effective_concurrency"],
        ):
            Tenant.objects.using(using).filter(tenant_id=tenant_id).update(
                throttled_until=now + timedelta(seconds=rules_.duration)
            )  # still noisy: renewed, no new event
        else:
            throttle_tenant(
                tenant_id, weight=weight, concurrency=why.concurrency,
                seconds=rules_.duration, reason=why.reason, using=using,
            )  # fmt: skip
        out[tenant_id] = why.reason
    forget_tenant_limits()
    return out


def _limits_of(row: Tenant | None, jobs: dict[str, int]) -> dict[str, Any]:
    """A page's tenant's limits in §10.2's form, as ``tenant_stats`` gives them: each
    limit its row sets, ``{"limit": n, "current": m}`` with ``current`` from the page's
    counts ``jobs`` (``max_enqueue_rate`` as set); ``{}`` without a row or limits."""
    if row is None:
        return {}
    limits = limits_of(row)
    out: dict[str, Any] = {}
    for name, limit, current in (
        ("max_concurrency", limits.max_concurrency, jobs["active"]),
        ("max_queue_depth", limits.max_queue_depth, jobs["available"] + jobs["scheduled"]),
        ("max_scheduled", limits.max_scheduled, jobs["scheduled"]),
    ):
        if limit is not None:
            out[name] = {"limit": limit, "current": current}
    if limits.enqueue_rate is not None:
        out["max_enqueue_rate"] = rules.wire(limits)["max_enqueue_rate"]
    return out


@dataclass(frozen=True)
class WaitingJob:
    """The job of a tenant that has waited longest at the head of a queue."""

    job_id: str
    queue: str
    priority: int
    #: When it became available: created, or due (scheduled, or its retry's time).
    since: datetime

    def age(self, now: datetime) -> float:
        """Seconds it has waited by ``now``."""
        return max(0.0, (now - self.since).total_seconds())


@dataclass
class TenantSummary:
    """One line of the tenants page: a tenant's jobs by state and what waits longest."""

    tenant_id: str
    #: Jobs by OJS state, every state present (0 when none).
    jobs: dict[str, int]
    #: The states whose count is the planner's estimate (more than the page counts).
    estimated: list[str]
    #: The longest waiting of the tenant's next jobs, one per queue; None: nothing waits.
    oldest_available: WaitingJob | None
    weight: float
    configured: bool
    limits: dict[str, Any] = field(default_factory=dict)
    #: The queues where it has jobs waiting (available).
    queues_waiting: int = 0
    #: The workers running its jobs now.
    workers: int = 0
    #: When its configuration was made (None: it has none).
    created_at: datetime | None = None

    @property
    def total(self) -> int:
        return sum(self.jobs.values())


def _since(head: dict[str, Any]) -> datetime:
    """When an available job became available: the latest of its creation, its enqueue,
    its scheduled time and its retry's time (those that are set)."""
    times = (head.get(k) for k in ("created_at", "enqueued_at", "scheduled_at", "next_attempt_at"))
    latest: datetime = max(t for t in times if t is not None)
    return latest


def _oldest(heads: list[dict[str, Any]]) -> dict[str, WaitingJob]:
    """Per tenant, the longest waiting of its queues' next jobs (ties: the lower id)."""
    oldest: dict[str, WaitingJob] = {}
    for head in heads:
        waiting = WaitingJob(str(head["id"]), head["queue"], head["priority"], _since(head))
        known = oldest.get(head["tenant"])
        if known is None or (waiting.since, waiting.job_id) < (known.since, known.job_id):
            oldest[head["tenant"]] = waiting
    return oldest


def oldest_available(tenant_id: str, *, using: str | None = None) -> WaitingJob | None:
    """The tenant's job that has waited longest at the head of a queue (one index
    descent per queue, ojs_job_tenant_claim_idx); None when none of its jobs waits."""
    using = db(using)
    tenant_id = validate_tenant(tenant_id, field="tenant_id")
    return _oldest(get_driver(using).tenant_heads([tenant_id])).get(tenant_id)


def tenant_summaries(
    tenant_ids: Sequence[str],
    *,
    exact_up_to: int = PAGE_EXACT_COUNT_UP_TO,
    using: str | None = None,
) -> list[TenantSummary]:
    """A page of tenants' summaries, in the order given (at most a page of them).

    Three statements whatever the table holds: counts per (tenant, state) from
    ojs_job_tenant_idx, exact up to ``exact_up_to`` then estimated; each tenant's next
    job in each queue from ojs_job_tenant_claim_idx (the longest waiting of those is
    ``oldest_available``: the job its tenant's turn brings next in that queue, not
    necessarily its oldest, when priorities or schedules differ); the ``Tenant`` rows.
    """
    using = db(using)
    ids = [t for t in tenant_ids if t]
    driver = get_driver(using)
    counts = driver.tenant_counts(ids, exact_up_to) if ids else {}
    heads = driver.tenant_heads(ids) if ids else []
    rows = {t.tenant_id: t for t in Tenant.objects.using(using).filter(tenant_id__in=ids)}
    oldest = _oldest(heads)
    queues = Counter(head["tenant"] for head in heads)
    # The workers running each tenant's jobs (its active jobs: few, along ojs_job_tenant_idx).
    workers = (
        dict(
            Job.objects.using(using)
            .filter(state=JobState.ACTIVE, tenant__in=ids)
            .exclude(tenant="")
            .order_by()
            .values("tenant")
            .annotate(n=Count("worker_id", distinct=True))
            .values_list("tenant", "n")
        )
        if ids
        else {}
    )
    out = []
    for tenant in ids:
        jobs = {s.value: 0 for s in JobState}
        estimated = []
        for state in jobs:
            n, estimate = counts.get((tenant, state), (0, False))
            jobs[state] = n
            if estimate:
                estimated.append(state)
        row = rows.get(tenant)
        out.append(
            TenantSummary(
                tenant_id=tenant,
                jobs=jobs,
                estimated=estimated,
                oldest_available=oldest.get(tenant),
                weight=DEFAULT_WEIGHT if row is None else float(row.weight),
                configured=row is not None,
                limits=_limits_of(row, jobs),
                queues_waiting=queues[tenant],
                workers=workers.get(tenant, 0),
                created_at=None if row is None else row.created_at,
            )
        )
    return out


def tenant_page(
    *,
    after: str = "",
    limit: int = 100,
    tenants: Sequence[str] | None = None,
    using: str | None = None,
) -> tuple[list[TenantSummary], str | None]:
    """``(summaries, next_after)``: the tenants after ``after`` in name order (named by
    jobs or configured), at most ``limit``, summarised; ``next_after`` is the cursor of
    the next page, None on the last one. ``tenants`` limits the page to those (an API
    key's), among them the ones with jobs or a configuration."""
    using = db(using)
    if tenants is None:
        ids = tenant_ids(after=after, limit=limit, using=using)
        cursor = ids[-1] if len(ids) == limit else None
    else:
        candidates = sorted({t for t in tenants if t > after})
        wanted = candidates[:limit]
        rows = Tenant.objects.using(using).filter(tenant_id__in=wanted)
        configured = set(rows.values_list("tenant_id", flat=True))
        jobs = Job.objects.using(using).exclude(tenant="")
        ids = [t for t in wanted if t in configured or jobs.filter(tenant=t).exists()]
        cursor = wanted[-1] if len(candidates) > limit else None
    return tenant_summaries(ids, using=using), cursor
