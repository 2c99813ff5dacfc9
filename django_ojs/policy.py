"""Effective per-job settings: one unit (milliseconds) and one "job value, else setting" rule.

Every duration inside django-ojs is an ``int`` of milliseconds. Settings are given in
seconds (``OJS_VISIBILITY_TIMEOUT = 30``) and the Python API accepts seconds or
``timedelta``; both are converted here, once, and nowhere else. :func:`effective` is the
single resolution of a job's timeouts used by the claim, heartbeats, settling, the reaper
and the worker. Reads configuration; writes nothing; imports nothing above ``conf``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django_ojs.conf import settings
from django_ojs.retry import RetryPolicy

# ---------------------------------------------------------------- unit converters


def seconds_to_ms(seconds: float) -> int:
    """Seconds (a setting, a caller's float) as whole milliseconds."""
    return round(seconds * 1000)


def ms_to_seconds(value_ms: int) -> float:
    """Milliseconds as seconds (for messages and ``time.monotonic`` arithmetic)."""
    return value_ms / 1000


def ms_delta(value_ms: int) -> timedelta:
    """Milliseconds as a ``timedelta`` (to add to a timestamp)."""
    return timedelta(milliseconds=value_ms)


def delta_ms(delta: timedelta) -> int:
    """A ``timedelta`` as whole milliseconds."""
    return round(delta.total_seconds() * 1000)


def elapsed_ms(since: datetime | None, now: datetime) -> int | None:
    """Milliseconds from ``since`` to ``now`` (``None`` when ``since`` is unknown)."""
    return delta_ms(now - since) if since is not None else None


# ---------------------------------------------------------------- timeouts


class HasTimeouts(Protocol):
    visibility_timeout_ms: int | None
    timeout_ms: int | None
    grace_period_ms: int | None
    heartbeat_timeout_ms: int | None


@dataclass(frozen=True)
class Durations:
    """The four timeouts that govern one attempt, in milliseconds."""

    visibility_ms: int
    timeout_ms: int
    grace_ms: int
    heartbeat_timeout_ms: int


def configured() -> Durations:
    """The configured defaults (``OJS_VISIBILITY_TIMEOUT`` etc.), in milliseconds."""
    return Durations(
        visibility_ms=seconds_to_ms(settings.VISIBILITY_TIMEOUT),
        timeout_ms=seconds_to_ms(settings.EXECUTION_TIMEOUT),
        grace_ms=seconds_to_ms(settings.GRACE_PERIOD),
        heartbeat_timeout_ms=seconds_to_ms(settings.HEARTBEAT_TIMEOUT),
    )


def _pick(value: int | None, default: int) -> int:
    return int(value) if value is not None else default


def effective(
    job: HasTimeouts, *, visibility_ms: int | None = None, defaults: Durations | None = None
) -> Durations:
    """The job's own timeouts, else the configured ones (a fetch may ask its own visibility).

    ``defaults`` lets a batch read the settings once (:func:`configured`).
    """
    base = defaults or configured()
    if (
        visibility_ms is None
        and job.visibility_timeout_ms is None
        and job.timeout_ms is None
        and job.grace_period_ms is None
        and job.heartbeat_timeout_ms is None
    ):
        return base  # most jobs: the configured timeouts as they are, nothing to build
    return Durations(
        visibility_ms=(
            visibility_ms
            if visibility_ms is not None
            else _pick(job.visibility_timeout_ms, base.visibility_ms)
        ),
        timeout_ms=_pick(job.timeout_ms, base.timeout_ms),
        grace_ms=_pick(job.grace_period_ms, base.grace_ms),
        heartbeat_timeout_ms=_pick(job.heartbeat_timeout_ms, base.heartbeat_timeout_ms),
    )


# ---------------------------------------------------------------- retry


_configured: tuple[dict[str, Any], RetryPolicy] | None = None


def default_retry_policy(max_attempts: int | None = None) -> RetryPolicy:
    """The configured default policy (``OJS_RETRY_POLICY`` over the OJS defaults)."""
    global _configured
    raw = settings.RETRY_POLICY
    cached = _configured  # validated once per distinct setting: every push asks for it
    if cached is not None and cached[0] == raw:
        policy = cached[1]
    else:
        policy = RetryPolicy.from_wire(raw)
        _configured = (raw, policy)
    if max_attempts is not None and max_attempts != policy.max_attempts:
        policy = RetryPolicy(**{**policy.__dict__, "max_attempts": max_attempts})
    return policy


def retry_policy(job: Any) -> RetryPolicy:
    """The policy that governs ``job``'s next failure."""
    base = default_retry_policy(job.max_attempts)
    return RetryPolicy.from_wire(job.retry, base=base) if job.retry else base
