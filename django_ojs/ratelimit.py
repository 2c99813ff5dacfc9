"""Rate limits (OJS rate-limiting extension §5-§7): the policy and what a key may start now.

Pure functions. A job's ``rate_limit`` names a **key** (jobs with the same key share the
limits) and any of: ``concurrency`` (active jobs at once), ``rate`` (starts per sliding
window) and ``throttle`` (starts evenly spaced: one per ``period / limit``). The claim asks
:func:`allowance` how many jobs of a key may start, holding a lock on the key
(``lifecycle/claim.py``).

Readings (``docs/explanation/spec-readings.md``): the OpenAPI/suite form
``{"max_per_second": N}`` is ``rate: {limit: N, period: "PT1S"}``; a policy without a
``key`` limits its queue (``queue:<name>``, §7.1's queue pattern); ``on_limit`` is ``wait``
(the job stays available until the limit allows it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django_ojs.exceptions import Unsupported, ValidationError
from django_ojs.validation import parse_duration

KEY = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._:-]*")
KEY_MAX = 255
FIELDS = frozenset({"key", "concurrency", "rate", "throttle", "on_limit", "max_per_second"})


@dataclass(frozen=True)
class Window:
    limit: int
    period_ms: int

    @property
    def period(self) -> timedelta:
        return timedelta(milliseconds=self.period_ms)


@dataclass(frozen=True)
class RateLimit:
    key: str
    concurrency: int | None = None
    rate: Window | None = None
    throttle: Window | None = None


def _fail(message: str, field: str = "rate_limit") -> ValidationError:
    return ValidationError(message, field=field)


def _count(value: Any, name: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(f"rate_limit.{name} must be an integer >= {minimum}", f"rate_limit.{name}")
    return value


def _window(value: Any, name: str) -> tuple[Window, dict[str, Any]]:
    if not isinstance(value, dict) or set(value) - {"limit", "period"}:
        raise _fail(f"rate_limit.{name} must be {{limit, period}}", f"rate_limit.{name}")
    limit = _count(value.get("limit"), f"{name}.limit", minimum=1)
    period = value.get("period")
    if not isinstance(period, str):
        raise _fail(
            f"rate_limit.{name}.period must be an ISO 8601 duration", f"rate_limit.{name}.period"
        )
    try:
        period_ms = parse_duration(period, field_name=f"rate_limit.{name}.period")
    except ValidationError as exc:
        raise _fail(exc.message, f"rate_limit.{name}.period") from None
    if period_ms <= 0:
        raise _fail(
            f"rate_limit.{name}.period must be longer than zero", f"rate_limit.{name}.period"
        )
    return Window(limit, period_ms), {"limit": limit, "period": period}


def policy(value: Any, queue: str) -> tuple[RateLimit, dict[str, Any]]:
    """Validate a job's ``rate_limit``; returns the policy and its normalised wire form."""
    if not isinstance(value, dict):
        raise _fail("rate_limit must be an object")
    unknown = sorted(set(value) - FIELDS)
    if unknown:
        raise _fail(f"rate_limit has unknown field(s): {', '.join(unknown)}")
    key = value.get("key", f"queue:{queue}")
    if not isinstance(key, str) or len(key) > KEY_MAX or not KEY.fullmatch(key):
        raise _fail("rate_limit.key must match [a-zA-Z0-9][a-zA-Z0-9._:-]*", "rate_limit.key")
    wire: dict[str, Any] = {"key": key}
    concurrency = None
    if value.get("concurrency") is not None:
        concurrency = _count(value["concurrency"], "concurrency", minimum=0)
        wire["concurrency"] = concurrency
    rate = throttle = None
    raw_rate = value.get("rate")
    if value.get("max_per_second") is not None:
        if raw_rate is not None:
            raise _fail("rate_limit: give rate or max_per_second, not both")
        raw_rate = {"limit": _count(value["max_per_second"], "max_per_second", minimum=1),
                    "period": "PT1S"}  # fmt: skip
    if raw_rate is not None:
        rate, wire["rate"] = _window(raw_rate, "rate")
    if value.get("throttle") is not None:
        throttle, wire["throttle"] = _window(value["throttle"], "throttle")
    on_limit = value.get("on_limit", "wait")
    if on_limit in ("reschedule", "drop"):
        raise Unsupported(
            f"rate_limit.on_limit '{on_limit}' is not supported; jobs wait ('wait')",
            details={"field": "rate_limit.on_limit"},
        )
    if on_limit != "wait":
        raise _fail(
            "rate_limit.on_limit must be 'wait', 'reschedule' or 'drop'", "rate_limit.on_limit"
        )
    wire["on_limit"] = "wait"
    if concurrency is None and rate is None and throttle is None:
        raise _fail("rate_limit needs concurrency, rate, max_per_second or throttle")
    return RateLimit(key, concurrency, rate, throttle), wire


def from_wire(wire: dict[str, Any]) -> RateLimit:
    """The policy of a stored (already normalised) ``rate_limit``."""
    rate = wire.get("rate")
    throttle = wire.get("throttle")
    return RateLimit(
        key=wire["key"],
        concurrency=wire.get("concurrency"),
        rate=Window(rate["limit"], parse_duration(rate["period"])) if rate else None,
        throttle=Window(throttle["limit"], parse_duration(throttle["period"]))
        if throttle
        else None,
    )


@dataclass(frozen=True)
class Usage:
    """What a key is doing now: active jobs, starts in its windows, the last start."""

    active: int
    started_in_rate_window: int
    last_started_at: datetime | None


def allowance(rule: RateLimit, usage: Usage, now: datetime) -> int:
    """How many jobs of ``rule.key`` may start now (0 when a limit is reached)."""
    allowed = 1_000_000
    if rule.concurrency is not None:
        allowed = min(allowed, rule.concurrency - usage.active)
    if rule.rate is not None:
        allowed = min(allowed, rule.rate.limit - usage.started_in_rate_window)
    if rule.throttle is not None:
        spacing = rule.throttle.period / rule.throttle.limit
        if usage.last_started_at is not None and now - usage.last_started_at < spacing:
            allowed = 0
        else:
            allowed = min(allowed, 1)
    return max(allowed, 0)


def reset_at(rule: RateLimit, usage: Usage, oldest_in_window: datetime | None) -> datetime | None:
    """When the window or throttle lets the next job start (``None``: not time-bound)."""
    times = []
    if (
        rule.rate is not None
        and oldest_in_window is not None
        and usage.started_in_rate_window >= rule.rate.limit
    ):
        times.append(oldest_in_window + rule.rate.period)
    if rule.throttle is not None and usage.last_started_at is not None:
        times.append(usage.last_started_at + rule.throttle.period / rule.throttle.limit)
    return max(times) if times else None


def binding(rule: RateLimit, usage: Usage, now: datetime) -> tuple[str, int, int]:
    """The limit that holds a key back: ``(strategy, limit, current)`` (§11.1 event data)."""
    if rule.concurrency is not None and usage.active >= rule.concurrency:
        return "concurrency", rule.concurrency, usage.active
    if rule.rate is not None and usage.started_in_rate_window >= rule.rate.limit:
        return "rate", rule.rate.limit, usage.started_in_rate_window
    if rule.throttle is not None:
        return "throttle", rule.throttle.limit, 1
    return "concurrency", rule.concurrency or 0, usage.active


def overridden(rule: RateLimit, override: dict[str, Any] | None) -> RateLimit:
    """``rule`` with the limits an operator set for its key (§10.2) in place of its own."""
    if not override:
        return rule
    extra = from_wire({"key": rule.key, **override})
    return RateLimit(
        rule.key,
        extra.concurrency if "concurrency" in override else rule.concurrency,
        extra.rate if "rate" in override else rule.rate,
        extra.throttle if "throttle" in override else rule.throttle,
    )
