"""A tenant's limits (OJS multi-tenancy §8): their wire form, and what they allow.

Pure: no database access. ``lifecycle.tenantlimits`` reads the numbers and applies
these rules: an enqueue beyond a limit is refused (§8.2: 429 ``tenant_limit_exceeded``)
or, with a soft quota (§15.5), let through and reported; a tenant at its
``max_concurrency`` gets no more claims until one of its jobs ends.

The wire form (§8.1)::

    {"max_concurrency": 20, "max_enqueue_rate": {"limit": 1000, "period": "PT1M"},
     "max_queue_depth": 50000, "max_scheduled": 10000, "priority_boost": 0,
     "quota": "hard"}

An update names the fields it changes; ``null`` removes a limit; a field left out keeps
its value (``PUT /admin/tenants/{id}/limits`` with only ``max_concurrency`` lowers that
one during an incident, §9.3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django_ojs.exceptions import TenantLimitExceeded, ValidationError
from django_ojs.validation import parse_duration

#: The fields of a tenant's limits on the wire.
FIELDS = (
    "max_concurrency",
    "max_enqueue_rate",
    "max_queue_depth",
    "max_scheduled",
    "priority_boost",
    "quota",
)
#: The largest number a limit may be (the database's bigint, with room).
MAX_LIMIT = 2**53
#: The largest ``max_concurrency`` and enqueue rate limit (32-bit integer columns).
MAX_CONCURRENCY = 2**31 - 1
#: ``priority_boost`` keeps a boosted priority in the core's range (-100..100).
MAX_BOOST = 200
QUOTAS = ("hard", "soft")


@dataclass(frozen=True)
class Limits:
    """A tenant's limits; ``None``: that one is not limited."""

    max_concurrency: int | None = None
    max_queue_depth: int | None = None
    max_scheduled: int | None = None
    #: ``(limit, period in ms)``: at most ``limit`` enqueued per period.
    enqueue_rate: tuple[int, int] | None = None
    priority_boost: int = 0
    quota: str = "hard"

    @property
    def on_enqueue(self) -> bool:
        """Whether an enqueue has something to count or change."""
        return (
            self.max_queue_depth is not None
            or self.max_scheduled is not None
            or self.enqueue_rate is not None
            or self.priority_boost != 0
        )

    @property
    def counted(self) -> bool:
        """Whether an enqueue has something to count (and a lock to take)."""
        return (
            self.max_queue_depth is not None
            or self.max_scheduled is not None
            or self.enqueue_rate is not None
        )

    @property
    def empty(self) -> bool:
        return self == Limits()


NONE = Limits()


def _count(value: Any, field: str, *, minimum: int = 0) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_LIMIT:
        raise ValidationError(f"{field} must be a whole number >= {minimum}", field=field)
    return value


def _rate(value: Any) -> tuple[int, int] | None:
    field = "max_enqueue_rate"
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"limit", "period"} or "limit" not in value:
        raise ValidationError(f"{field} must be {{limit, period}}", field=field)
    limit = _count(value["limit"], f"{field}.limit", minimum=1)
    if limit is not None and limit > MAX_CONCURRENCY:
        raise ValidationError(
            f"{field}.limit must be at most {MAX_CONCURRENCY}", field=f"{field}.limit"
        )
    period = value.get("period", "PT1S")
    try:
        period_ms = parse_duration(period, field_name=f"{field}.period")
    except ValidationError as exc:
        raise ValidationError(exc.message, field=f"{field}.period") from None
    if period_ms <= 0:
        raise ValidationError(f"{field}.period must be longer than zero", field=f"{field}.period")
    assert limit is not None
    return limit, period_ms


def parse(body: Any, base: Limits = NONE) -> Limits:
    """``base`` updated with the limits ``body`` names (§8.1's fields; ``null`` removes
    one). Raises :class:`ValidationError` on an unknown field or a malformed value."""
    if not isinstance(body, dict):
        raise ValidationError("limits must be an object", field="limits")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise ValidationError(f"Unknown limit '{unknown[0]}'", field=unknown[0])
    changes: dict[str, Any] = {}
    for field in ("max_concurrency", "max_queue_depth", "max_scheduled"):
        if field in body:
            changes[field] = _count(body[field], field)
    if (changes.get("max_concurrency") or 0) > MAX_CONCURRENCY:
        raise ValidationError(
            f"max_concurrency must be at most {MAX_CONCURRENCY}", field="max_concurrency"
        )
    if "max_enqueue_rate" in body:
        changes["enqueue_rate"] = _rate(body["max_enqueue_rate"])
    if "priority_boost" in body:
        boost = body["priority_boost"]
        if boost is None:
            boost = 0
        if isinstance(boost, bool) or not isinstance(boost, int) or abs(boost) > MAX_BOOST:
            raise ValidationError(
                f"priority_boost must be a whole number from -{MAX_BOOST} to {MAX_BOOST}",
                field="priority_boost",
            )
        changes["priority_boost"] = boost
    if "quota" in body:
        quota = body["quota"] if body["quota"] is not None else "hard"
        if quota not in QUOTAS:
            raise ValidationError("quota must be 'hard' or 'soft'", field="quota")
        changes["quota"] = quota
    return replace(base, **changes)


def wire(limits: Limits) -> dict[str, Any]:
    """The §8.1 form of ``limits`` (every field; ``null`` where none)."""
    rate = limits.enqueue_rate
    return {
        "max_concurrency": limits.max_concurrency,
        "max_enqueue_rate": None
        if rate is None
        else {"limit": rate[0], "period": _iso_period(rate[1])},
        "max_queue_depth": limits.max_queue_depth,
        "max_scheduled": limits.max_scheduled,
        "priority_boost": limits.priority_boost,
        "quota": limits.quota,
    }


def _iso_period(ms: int) -> str:
    seconds, rest = divmod(ms, 1000)
    return f"PT{seconds}.{rest:03d}S" if rest else f"PT{seconds}S"


def boosted(priority: int, limits: Limits) -> int:
    """A job's priority with its tenant's ``priority_boost``, kept in -100..100."""
    if not limits.priority_boost:
        return priority
    return max(-100, min(100, priority + limits.priority_boost))


@dataclass(frozen=True)
class Usage:
    """What a tenant holds when it enqueues: jobs available and scheduled (``depth``),
    scheduled, and its enqueue window (when it began, how many it took)."""

    depth: int = 0
    scheduled: int = 0
    window_start: datetime | None = None
    window_count: int = 0


def window(limits: Limits, usage: Usage, now: datetime) -> tuple[datetime, int]:
    """The enqueue window ``now`` falls in: its start and its count so far (a fixed
    window of the rate's period, begun by the first enqueue after the last one ended)."""
    rate = limits.enqueue_rate
    start, count = usage.window_start, usage.window_count
    if rate is None or start is None or now >= start + timedelta(milliseconds=rate[1]):
        return now, 0
    return start, count


def exceeded(
    tenant: str, limits: Limits, usage: Usage, now: datetime, *, adding: int, scheduled: int
) -> TenantLimitExceeded | None:
    """The first limit that ``adding`` more jobs (``scheduled`` of them for later) would
    exceed, as the error to raise (or, with a soft quota, to report); ``None`` if none."""
    checks: list[tuple[str, int | None, int, int]] = [
        ("max_queue_depth", limits.max_queue_depth, usage.depth, adding),
        ("max_scheduled", limits.max_scheduled, usage.scheduled, scheduled),
    ]
    retry_after = 30
    if limits.enqueue_rate is not None:
        start, count = window(limits, usage, now)
        checks.insert(0, ("max_enqueue_rate", limits.enqueue_rate[0], count, adding))
        ends = start + timedelta(milliseconds=limits.enqueue_rate[1])
        rate_retry = max(1, int((ends - now).total_seconds() + 0.999))
    for name, maximum, current, more in checks:
        if maximum is not None and more > 0 and current + more > maximum:
            wait = rate_retry if name == "max_enqueue_rate" else retry_after
            return TenantLimitExceeded(tenant, name, current, maximum, retry_after=wait)
    return None


# -- Noisy neighbours (§9.1-§9.2) -----------------------------------------------------------

#: ``OJS_TENANT_THROTTLING``'s keys and their defaults (§9.1's thresholds).
THROTTLING_DEFAULTS: dict[str, float] = {
    # A tenant whose available jobs are more than this many times the median of the
    # other tenants' (with jobs waiting), and at least ``min_depth``...
    "depth_ratio": 10.0,
    "min_depth": 1000,
    # ...gets this fraction of its weight (its next jobs take turns further apart).
    "weight_factor": 0.2,
    # A tenant running more than this share of all active jobs while another tenant's
    # jobs wait, with at least ``min_active`` active, is held to that share.
    "active_share": 0.5,
    "min_active": 10,
    # How long a throttle lasts (seconds); it is renewed while the tenant stays noisy.
    "duration": 300.0,
    # Seconds between two detections (the reaper's passes in between skip it).
    "every": 30.0,
}


@dataclass(frozen=True)
class Throttling:
    depth_ratio: float
    min_depth: float
    weight_factor: float
    active_share: float
    min_active: float
    duration: float
    every: float


def throttling(value: Any) -> Throttling | None:
    """``OJS_TENANT_THROTTLING``: ``None``/``False`` (off, the default), ``True`` (on, with
    §9.1's thresholds) or a dict overriding some of :data:`THROTTLING_DEFAULTS`."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise ValidationError("OJS_TENANT_THROTTLING must be None, a bool or a dict")
    unknown = sorted(set(value) - set(THROTTLING_DEFAULTS))
    if unknown:
        raise ValidationError(f"OJS_TENANT_THROTTLING has an unknown key '{unknown[0]}'")
    merged = {**THROTTLING_DEFAULTS, **value}
    for key, number in merged.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0:
            raise ValidationError(f"OJS_TENANT_THROTTLING['{key}'] must be a positive number")
    if merged["weight_factor"] > 1 or merged["active_share"] > 1:
        raise ValidationError("OJS_TENANT_THROTTLING's weight_factor and active_share are <= 1")
    return Throttling(**{k: float(v) for k, v in merged.items()})


@dataclass(frozen=True)
class Noisy:
    """A tenant found noisy: why (§9.2's ``reason``), and what to do about it."""

    reason: str
    #: A concurrency to hold it to (``active_job_ratio_exceeded``), else ``None``.
    concurrency: int | None = None
    #: Whether to reduce its weight (``queue_depth_ratio_exceeded``).
    weight: bool = False


def noisy(
    depths: Mapping[str, int], actives: Mapping[str, int], total_active: int, rules: Throttling
) -> dict[str, Noisy]:
    """The noisy tenants (§9.1), from each tenant's available jobs (``depths``) and active
    ones (``actives``), and all active jobs (with or without a tenant).

    Readings: the median is of the *other* tenants with jobs waiting (with all of them,
    a tenant beside one other could never be ten times it); a tenant is held to its
    active share only while another tenant's jobs wait (running more than half of the
    jobs on an otherwise idle system is using spare capacity, not taking it)."""
    out: dict[str, Noisy] = {}
    waiting = {t: n for t, n in depths.items() if n > 0}
    for tenant, depth in waiting.items():
        others = sorted(n for t, n in waiting.items() if t != tenant)
        if not others or depth < rules.min_depth:
            continue
        middle = len(others) // 2
        median = others[middle] if len(others) % 2 else (others[middle - 1] + others[middle]) / 2
        if depth > rules.depth_ratio * median:
            out[tenant] = Noisy("queue_depth_ratio_exceeded", weight=True)
    if total_active >= rules.min_active:
        share = max(1, int(rules.active_share * total_active))
        for tenant, active in actives.items():
            others_wait = any(n > 0 for t, n in waiting.items() if t != tenant)
            if active > rules.active_share * total_active and others_wait:
                found = out.get(tenant)
                out[tenant] = Noisy(
                    "active_job_ratio_exceeded" if found is None else found.reason,
                    concurrency=share,
                    weight=found is not None and found.weight,
                )
    return out


def declared(value: Any) -> dict[str, tuple[float | None, dict[str, Any] | None]]:
    """``OJS_TENANTS`` (multi-tenancy §15.1, static configuration): ``{tenant_id:
    {"fairness_weight": 10, "limits": {...}, "priority_boost": 2}}``, validated, as
    ``{tenant_id: (weight or None, limits or None)}``."""
    from django_ojs.tenancy import validate_tenant  # pure, like this module

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError("OJS_TENANTS must be a dict of tenant id to configuration")
    out: dict[str, tuple[float | None, dict[str, Any] | None]] = {}
    for tenant, config in value.items():
        validate_tenant(tenant, field="OJS_TENANTS")
        if not isinstance(config, dict):
            raise ValidationError(f"OJS_TENANTS['{tenant}'] must be a dict")
        unknown = sorted(set(config) - {"fairness_weight", "weight", "limits", "priority_boost"})
        if unknown:
            raise ValidationError(f"OJS_TENANTS['{tenant}'] has an unknown key '{unknown[0]}'")
        weight = config.get("fairness_weight", config.get("weight"))
        if weight is not None and (
            isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0
        ):
            raise ValidationError(f"OJS_TENANTS['{tenant}']'s weight must be a positive number")
        limits = config.get("limits")
        if "priority_boost" in config:
            limits = {**(limits or {}), "priority_boost": config["priority_boost"]}
        if limits is not None:
            try:
                parse(limits)
            except ValidationError as exc:
                raise ValidationError(f"OJS_TENANTS['{tenant}']: {exc.message}") from None
        out[tenant] = (None if weight is None else float(weight), limits)
    return out
