"""What a rate-limit key is doing (rate-limiting §10.1, §10.3): reads for the HTTP API and admin.

A key's limits are those of its newest job (a policy travels with the jobs that use it).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from django_ojs import ratelimit
from django_ojs.envelope import format_timestamp
from django_ojs.exceptions import NotFound
from django_ojs.lifecycle.claim import usage_of
from django_ojs.lifecycle.store import db
from django_ojs.models import Job
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
            **wire["rate"],
            "current_count": usage.started_in_rate_window,
            "window_resets_at": format_timestamp(resets) if resets else None,
        }
    if rule.throttle is not None:
        spacing = rule.throttle.period / rule.throttle.limit
        last = usage.last_started_at
        body["throttle"] = {
            **wire["throttle"],
            "next_allowed_at": format_timestamp(last + spacing if last else now),
        }
    body["allowed_now"] = ratelimit.allowance(rule, usage, now)
    body["waiting_count"] = jobs.filter(state=JobState.AVAILABLE).count()
    return body
