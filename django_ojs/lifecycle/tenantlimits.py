"""Per-tenant limits at work (OJS multi-tenancy §8): what an enqueue may add, and how many
of a tenant's jobs a claim may start.

The rules are ``django_ojs.tenantlimits`` (pure); the configuration is the ``Tenant``
rows (``lifecycle.tenants`` writes them). Each process reads the limited tenants at most
once per ``OJS_TENANT_LIMITS_CACHE_SECONDS`` (one query; a change made in this process
applies at once), so a push or a claim with no limited tenant pays nothing more.

* **Enqueue** (:func:`admit`): the tenants of a push whose limits count something
  (``max_queue_depth``, ``max_scheduled``, ``max_enqueue_rate``) are locked (their rows,
  ``SELECT … FOR UPDATE``, in name order), their jobs counted, and the push refused with
  :class:`TenantLimitExceeded` (429) when it would exceed one, all or nothing for a batch.
  Pushes of one limited tenant run one after another; the others' do not wait.
* **Claims** (:func:`allowance`, used by ``lifecycle.claim``): ``max_concurrency`` caps a
  tenant's active jobs across every queue. A claim that may take jobs of such tenants locks
  them, counts their active jobs and takes at most what is left, so the cap holds under
  any number of concurrent fetches.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db.models import Count
from django.utils import timezone

from django_ojs import tenantlimits
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import JobSpec
from django_ojs.exceptions import TenantLimitExceeded
from django_ojs.lifecycle import events
from django_ojs.lifecycle.store import db
from django_ojs.models import Job, Tenant
from django_ojs.states import JobState
from django_ojs.tenancy import tenant_of
from django_ojs.tenantlimits import Limits

#: Per database: when the limited tenants were read (on ``_clock``), their limits, and
#: the throttled ones' concurrency and its end (noisy-neighbour throttling, §9.2).
_cache: dict[str, tuple[float, dict[str, Limits], dict[str, tuple[int, datetime]]]] = {}
_clock = time.monotonic
#: The prefix of a tenant's lock name (``Driver.lock_keys``) while a claim counts its jobs.
LOCK_PREFIX = "ojs.tenant:"


def limits_of(row: Tenant) -> Limits:
    """The limits a ``Tenant`` row holds."""
    rate = None
    if row.enqueue_rate_limit is not None and row.enqueue_rate_period_ms:
        rate = (row.enqueue_rate_limit, row.enqueue_rate_period_ms)
    return Limits(
        max_concurrency=row.max_concurrency,
        max_queue_depth=row.max_queue_depth,
        max_scheduled=row.max_scheduled,
        enqueue_rate=rate,
        priority_boost=row.priority_boost,
        quota=row.quota,
    )


def configured(using: str) -> dict[str, Limits]:
    """The tenants that have limits, and theirs (cached, see the module's docstring)."""
    return _read(using)[1]


def _read(using: str) -> tuple[float, dict[str, Limits], dict[str, tuple[int, datetime]]]:
    ttl = settings.TENANT_LIMITS_CACHE_SECONDS
    now = _clock()
    cached = _cache.get(using)
    if cached is not None and now - cached[0] < ttl:
        return cached
    rows = Tenant.objects.using(using).exclude(
        max_concurrency=None,
        max_queue_depth=None,
        max_scheduled=None,
        enqueue_rate_limit=None,
        priority_boost=0,
        throttled_concurrency=None,
    )
    found = {row.tenant_id: limits for row in rows if not (limits := limits_of(row)).empty}
    throttled = {
        row.tenant_id: (row.throttled_concurrency, row.throttled_until)
        for row in rows
        if row.throttled_concurrency is not None and row.throttled_until is not None
    }
    read = (now, found, throttled)
    if ttl > 0:
        _cache[using] = read
    return read


def tenant_limits(*, using: str | None = None) -> dict[str, Limits]:
    """The tenants that have limits, and theirs, as this process sees them now."""
    return configured(db(using))


def forget_tenant_limits() -> None:
    """Drop this process's cached limits (after a change; tests)."""
    _cache.clear()


# -- Enqueue ------------------------------------------------------------------------------


def of_specs(specs: Iterable[JobSpec], using: str) -> dict[str, Limits]:
    """The limits an enqueue of ``specs`` has to apply, per tenant ({} almost always)."""
    limited = configured(using)
    if not limited:
        return {}
    out = {}
    for spec in specs:
        tenant = tenant_of(spec.meta)
        if tenant and tenant in limited and limited[tenant].on_enqueue:
            out[tenant] = limited[tenant]
    return out


def boosted(specs: Sequence[JobSpec], limits: Mapping[str, Limits]) -> list[JobSpec]:
    """``specs`` with their tenants' ``priority_boost`` added to their priorities."""
    out = []
    for spec in specs:
        found = limits.get(tenant_of(spec.meta))
        if found is not None and found.priority_boost:
            spec = replace(spec, priority=tenantlimits.boosted(spec.priority, found))
        out.append(spec)
    return out


def admit(
    specs: Sequence[JobSpec], limits: Mapping[str, Limits], now: datetime, using: str
) -> None:
    """Refuse the push of ``specs`` (:class:`TenantLimitExceeded`) if it would take a tenant
    past a hard limit; count it in the tenants' enqueue windows otherwise. Call inside
    the push's transaction: the tenants' rows stay locked until it ends.

    A soft quota (§15.5) lets the push through and reports it (``tenant.limit_exceeded``).
    """
    counted = sorted(t for t, limit in limits.items() if limit.counted)
    if not counted:
        return
    adding: dict[str, int] = dict.fromkeys(counted, 0)
    later: dict[str, int] = dict.fromkeys(counted, 0)
    for spec in specs:
        tenant = tenant_of(spec.meta)
        if tenant in adding:
            adding[tenant] += 1
            if spec.scheduled_at is not None and spec.scheduled_at > now:
                later[tenant] += 1
    rows = {
        row.tenant_id: row
        for row in Tenant.objects.using(using)
        .select_for_update()
        .filter(tenant_id__in=counted)
        .order_by("tenant_id")
    }
    for tenant in counted:
        row = rows.get(tenant)
        if row is None:
            continue  # forgotten since it was cached: no limits any more
        limit = limits_of(row)  # what holds now, under the lock
        usage = _usage(tenant, limit, row, using)
        error = tenantlimits.exceeded(
            tenant, limit, usage, now, adding=adding[tenant], scheduled=later[tenant]
        )
        if error is not None:
            if limit.quota == "hard":
                raise error  # the push reports it once rolled back (refused)
            _report(error, using, quota=limit.quota)
        if limit.enqueue_rate is not None:
            start, count = tenantlimits.window(limit, usage, now)
            Tenant.objects.using(using).filter(tenant_id=tenant).update(
                enqueue_window_start=start, enqueue_window_count=count + adding[tenant]
            )


def _usage(tenant: str, limits: Limits, row: Tenant, using: str) -> tenantlimits.Usage:
    """What ``tenant`` holds now, counted as far as its limits need (each count stops at
    its maximum + 1: a tenant at a depth of 50,000 costs 50,001 index entries)."""
    jobs = Job.objects.using(using).filter(tenant=tenant).exclude(tenant="")
    depth = scheduled = 0
    if limits.max_queue_depth is not None:
        waiting = jobs.filter(state__in=[JobState.AVAILABLE, JobState.SCHEDULED])
        depth = _bounded(waiting, limits.max_queue_depth + 1)
    if limits.max_scheduled is not None:
        scheduled = _bounded(jobs.filter(state=JobState.SCHEDULED), limits.max_scheduled + 1)
    return tenantlimits.Usage(depth, scheduled, row.enqueue_window_start, row.enqueue_window_count)


def _bounded(jobs: Any, cap: int) -> int:
    return int(jobs.order_by().values("id")[:cap].count())


def _report(error: TenantLimitExceeded, using: str, *, quota: str) -> None:
    """``tenant.limit_exceeded`` (§11.1): a push refused, or let through by a soft quota."""
    events.emit_other(
        "tenant.limit_exceeded", error.tenant, using, tenant_id=error.tenant,
        limit=error.limit, current=error.current, maximum=error.maximum, quota=quota,
        action="allowed" if quota == "soft" else "rejected",
    )  # fmt: skip


def refused(error: TenantLimitExceeded, using: str) -> None:
    """Report a refused push, after its transaction rolled back (call outside it)."""
    _report(error, using, quota="hard")


# -- Claims -------------------------------------------------------------------------------


def concurrency_limits(using: str) -> dict[str, int]:
    """The tenants with a ``max_concurrency`` or a throttled concurrency (the smaller
    while its throttle lasts), and theirs ({} almost always)."""
    _, limited, throttled = _read(using)
    caps = {
        tenant: limits.max_concurrency
        for tenant, limits in limited.items()
        if limits.max_concurrency is not None
    }
    if throttled:
        now = timezone.now()
        for tenant, (cap, until) in throttled.items():
            if until > now:
                caps[tenant] = min(cap, caps.get(tenant, cap))
    return caps


def active_counts(tenants: Sequence[str], using: str) -> dict[str, int]:
    """Active jobs per tenant of ``tenants`` (along ojs_job_tenant_idx)."""
    if not tenants:
        return {}
    rows = (
        Job.objects.using(using)
        .filter(state=JobState.ACTIVE, tenant__in=list(tenants))
        .exclude(tenant="")
        .order_by()
        .values("tenant")
        .annotate(n=Count("id"))
        .values_list("tenant", "n")
    )
    found = dict.fromkeys(tenants, 0)
    found.update(dict(rows))
    return found


def allowance(tenants: Iterable[str], caps: Mapping[str, int], using: str) -> dict[str, int]:
    """How many more jobs each of ``tenants`` (those with a cap) may start now: the locks
    of those tenants are taken (until the transaction ends, in name order: no deadlock),
    then their active jobs counted. Call inside the claim's transaction."""
    mine = sorted({t for t in tenants if t in caps})
    if not mine:
        return {}
    get_driver(using).lock_keys([LOCK_PREFIX + t for t in mine])
    active = active_counts(mine, using)
    return {t: max(caps[t] - active[t], 0) for t in mine}
