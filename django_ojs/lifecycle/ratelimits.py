"""What a rate-limit key is doing (rate-limiting §10.1, §10.3): reads for the HTTP API and admin.

A key's limits are those of its newest job (a policy travels with the jobs that use it).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs import ratelimit
from django_ojs.actors import Actor
from django_ojs.envelope import format_timestamp, parse_timestamp
from django_ojs.exceptions import NotFound, ValidationError
from django_ojs.lifecycle import audit
from django_ojs.lifecycle.claim import usage_of
from django_ojs.lifecycle.store import db
from django_ojs.models import Job, RateLimitState
from django_ojs.states import JobState


def keys(*, using: str | None = None) -> list[str]:
    """Keys with jobs waiting or running, sorted."""
    found = (
        Job.objects.using(db(using))
        .filter(rate_key__isnull=False, state__in=[JobState.AVAILABLE, JobState.ACTIVE])
        .order_by()
        .values_list("rate_key", flat=True)
        .distinct()
    )
    return sorted(key for key in found if key is not None)


def status(key: str, *, using: str | None = None) -> dict[str, Any]:
    """The §10.1 document of ``key``; :class:`NotFound` when no job ever used it."""
    using = db(using)
    jobs = Job.objects.using(using).filter(rate_key=key)
    wire = jobs.order_by("-id").values_list("rate_limit", flat=True).first()
    if not isinstance(wire, dict):
        raise NotFound(
            f"Rate limit key '{key}' not found.",
            details={"resource_type": "rate_limit", "resource_id": key},
        )
    rule = ratelimit.from_wire(wire)
    now = timezone.now()
    state = RateLimitState.objects.using(using).filter(key=key).first()
    active_override = None
    current = state is not None and (state.override_until is None or state.override_until > now)
    if state is not None and state.override and current:
        active_override = state.override
        rule = ratelimit.overridden(rule, state.override)
    usage, oldest = usage_of(key, rule, now, using)
    if rule.concurrency is None:
        usage = ratelimit.Usage(
            jobs.filter(state=JobState.ACTIVE).count(), usage.started_in_rate_window,
            usage.last_started_at,
        )  # fmt: skip
    body: dict[str, Any] = {"key": key, "on_limit": "wait"}
    if rule.concurrency is not None:
        body["concurrency"] = {
            "limit": rule.concurrency,
            "active": usage.active,
            "available": max(rule.concurrency - usage.active, 0),
        }
    else:
        body["active_count"] = usage.active
    resets = ratelimit.reset_at(rule, usage, oldest)
    if rule.rate is not None:
        body["rate"] = {
            "limit": rule.rate.limit,
            "period": _iso(rule.rate.period_ms),
            "current_count": usage.started_in_rate_window,
            "window_resets_at": format_timestamp(resets) if resets else None,
        }
    if rule.throttle is not None:
        spacing = rule.throttle.period / rule.throttle.limit
        last = usage.last_started_at
        body["throttle"] = {
            "limit": rule.throttle.limit,
            "period": _iso(rule.throttle.period_ms),
            "next_allowed_at": format_timestamp(last + spacing if last else now),
        }
    body["allowed_now"] = ratelimit.allowance(rule, usage, now)
    if active_override is not None:
        assert state is not None
        body["override"] = {
            **active_override,
            "expires_at": format_timestamp(state.override_until) if state.override_until else None,
        }
    body["waiting_count"] = jobs.filter(state=JobState.AVAILABLE).count()
    return body


def _iso(ms: int) -> str:
    seconds = ms / 1000
    return f"PT{int(seconds)}S" if seconds == int(seconds) else f"PT{seconds}S"


def override(
    key: str,
    limits: Any,
    *,
    until: Any = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> RateLimitState:
    """Override the limits of ``key`` (rate-limiting §10.2), until ``until`` if given.

    ``limits`` holds any of ``concurrency``, ``rate``, ``throttle`` (``{"concurrency": 0}``
    stops the key, e.g. while a partner API is down); they replace the jobs' own limits of
    the same kind. Validated like a job's policy.
    """
    using = db(using)
    if not isinstance(limits, dict):
        raise ValidationError("the override must be an object", field="")
    chosen = {k: v for k, v in limits.items() if k in ("concurrency", "rate", "throttle")}
    unknown = sorted(set(limits) - {"concurrency", "rate", "throttle", "expires_at"})
    if unknown:
        raise ValidationError(f"unknown override field(s): {', '.join(unknown)}", field=unknown[0])
    _, wire = ratelimit.policy({"key": key, **chosen}, "")
    stored = {k: v for k, v in wire.items() if k in chosen}
    expires = None
    if until is not None:
        expires = parse_timestamp(until, "expires_at")
    now = timezone.now()
    with transaction.atomic(using=using):
        state, _ = RateLimitState.objects.using(using).update_or_create(
            key=key, defaults={"override": stored, "override_until": expires, "changed_at": now}
        )
        audit.record(actor, "rate_limit.override", using, key=key, override=stored,
                     expires_at=format_timestamp(expires))  # fmt: skip
    return state


def clear_override(key: str, *, actor: Actor | None = None, using: str | None = None) -> None:
    """Remove an override: the jobs' own limits apply again."""
    using = db(using)
    with transaction.atomic(using=using):
        RateLimitState.objects.using(using).filter(key=key).update(
            override=None, override_until=None
        )
        audit.record(actor, "rate_limit.clear_override", using, key=key)
