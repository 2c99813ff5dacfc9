"""Effective per-job settings: retry policy and timeouts, job value over configured default.

Reads configuration; writes nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django_ojs.conf import settings
from django_ojs.exceptions import ValidationError
from django_ojs.retry import RetryPolicy


def default_retry_policy(max_attempts: int | None = None) -> RetryPolicy:
    """The configured default policy (``OJS_RETRY_POLICY`` over the OJS defaults)."""
    policy = RetryPolicy.from_wire(settings.RETRY_POLICY)
    if max_attempts is not None and max_attempts != policy.max_attempts:
        policy = RetryPolicy(**{**policy.__dict__, "max_attempts": max_attempts})
    return policy


def retry_policy(job: Any) -> RetryPolicy:
    """The policy that governs ``job``'s next failure."""
    base = default_retry_policy(job.max_attempts)
    return RetryPolicy.from_wire(job.retry, base=base) if job.retry else base


def ms(value: int | None, default_seconds: float) -> int:
    """A job's millisecond value, or the configured default given in seconds."""
    return int(value) if value is not None else round(default_seconds * 1000)


def visibility_ms(job: Any, requested_ms: int | None = None) -> int:
    return (
        requested_ms
        if requested_ms is not None
        else ms(job.visibility_timeout_ms, settings.VISIBILITY_TIMEOUT)
    )


def timeout_ms(job: Any) -> int:
    return ms(job.timeout_ms, settings.EXECUTION_TIMEOUT)


def grace_ms(job: Any) -> int:
    return ms(job.grace_period_ms, settings.GRACE_PERIOD)


def heartbeat_timeout_ms(job: Any) -> int:
    return ms(job.heartbeat_timeout_ms, settings.HEARTBEAT_TIMEOUT)


def millis(n: int) -> timedelta:
    return timedelta(milliseconds=n)


def requested_ms(value: float | timedelta | None, field_name: str) -> int | None:
    """A caller's positive duration (seconds or ``timedelta``) in ms; ``None`` passes."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValidationError(
            f"{field_name} must be a positive number of seconds", field=field_name
        )
    return round(value * 1000)
