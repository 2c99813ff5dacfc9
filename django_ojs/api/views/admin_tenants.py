"""Admin API tenants (OJS multi-tenancy §10): list, detail, configure, forget, statistics,
and a tenant's jobs.

A key limited to some tenants sees and changes only those. Limits (§8.1) are set with
``PUT /admin/tenants/{id}`` (``limits``) or ``PUT /admin/tenants/{id}/limits``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework.response import Response

from django_ojs import envelope, jobquery, lifecycle
from django_ojs.api.permissions import MANAGE
from django_ojs.api.views.admin import LIST_PARAMS, AdminView, job_summary, paginate
from django_ojs.exceptions import ValidationError
from django_ojs.tenancy import validate_tenant
from django_ojs.validation import parse_duration

#: Most tenants one page of ``GET /admin/tenants`` lists.
MAX_PAGE = 500


class TenantView(AdminView):
    def tenant(self, request: Any, tenant_id: str) -> str:
        """The path's tenant (400 when malformed), 403 outside the caller's tenants."""
        tenant = validate_tenant(tenant_id, field="tenant_id")
        self.principal(request).require_tenant(tenant, MANAGE)
        return tenant


#: What ``PUT /admin/tenants/{id}`` takes (§8.1's configuration).
CONFIG_FIELDS = {"fairness_weight", "weight", "tenant_id", "limits", "priority_boost", "reason"}


def _config(body: dict[str, Any], tenant: str) -> tuple[Any, dict[str, Any] | None]:
    """The weight and the limits a PUT sets: ``fairness_weight`` (§8.1) or ``weight``;
    ``limits``, with §8.1's top-level ``priority_boost`` among them (``None``: no
    change to the limits)."""
    unknown = sorted(set(body) - CONFIG_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown field '{unknown[0]}'", field=unknown[0])
    named = body.get("tenant_id", tenant)
    if named != tenant:
        raise ValidationError("tenant_id differs from the tenant of the path", field="tenant_id")
    limits = body.get("limits")
    if limits is not None and not isinstance(limits, dict):
        raise ValidationError("limits must be an object", field="limits")
    if "priority_boost" in body:
        limits = {**(limits or {}), "priority_boost": body["priority_boost"]}
    return body.get("fairness_weight", body.get("weight", 1.0)), limits


def _reason(body: dict[str, Any]) -> str:
    reason = body.get("reason", "")
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise ValidationError("reason must be a string", field="reason")
    return reason


def oldest(waiting: lifecycle.WaitingJob | None, now: datetime) -> dict[str, Any]:
    """The fields saying what of a tenant waits longest (``null`` when nothing waits)."""
    if waiting is None:
        return {
            "oldest_available": None,
            "oldest_available_at": None,
            "oldest_available_age_seconds": None,
        }
    since = envelope.format_timestamp(waiting.since)
    age = round(waiting.age(now), 3)
    return {
        "oldest_available": {
            "job_id": waiting.job_id,
            "queue": waiting.queue,
            "priority": waiting.priority,
            "available_since": since,
            "age_seconds": age,
        },
        "oldest_available_at": since,
        "oldest_available_age_seconds": age,
    }


def summary(item: lifecycle.TenantSummary, now: datetime) -> dict[str, Any]:
    """One tenant of ``GET /admin/tenants``: its weight, jobs by state, running, oldest."""
    return {
        "tenant_id": item.tenant_id,
        "fairness_weight": item.weight,
        "configured": item.configured,
        "jobs": item.jobs,
        "estimated": item.estimated,
        "total_jobs": item.total,
        "active": item.jobs["active"],
        **oldest(item.oldest_available, now),
        "limits": {**item.limits, **_ui_limits(item.limits)},
        # The official OJS admin UI's Tenant (its types.ts), beside the spec's fields.
        "id": item.tenant_id,
        "name": item.tenant_id,
        "state": "active",
        "created_at": None
        if item.created_at is None
        else envelope.format_timestamp(item.created_at),
        "stats": {"queues": item.queues_waiting, "jobs": item.jobs, "workers": item.workers},
        "queues_waiting": item.queues_waiting,
        "workers": item.workers,
    }


def _ui_limits(limits: dict[str, Any]) -> dict[str, Any]:
    """The admin UI's name of ``max_concurrency`` (``max_concurrent_jobs``), when set."""
    found = limits.get("max_concurrency")
    return {"max_concurrent_jobs": found["limit"]} if isinstance(found, dict) else {}


#: Most tenants counted for the ``total`` of a numbered page (``?page=``).
MAX_TOTAL = 10_000


def _number(params: Any, name: str, default: int, top: int) -> int:
    try:
        value = int(params.get(name) or default)
    except ValueError:
        raise ValidationError(f"{name} must be a whole number", field=name) from None
    if not 1 <= value <= top:
        raise ValidationError(f"{name} must be between 1 and {top}", field=name)
    return value


class TenantsView(TenantView):
    """``GET /admin/tenants?after=&limit=``: tenants in name order (named by jobs or
    configured), each with its weight, jobs by state (exact up to 1,000 per state, then
    estimated), running jobs and the job that waits longest; keyset pages (``after``)."""

    reads_from_replica = True

    def get(self, request: Any) -> Response:
        params = request.query_params
        if "page" in params or "per_page" in params:
            return self.numbered(request)
        after = params.get("after") or ""
        if after:
            validate_tenant(after, field="after")
        limit = _number(params, "limit", 100, MAX_PAGE)
        summaries, cursor = lifecycle.tenant_page(
            after=after, limit=limit, tenants=self.tenant_scope(request),
            using=self.reading(request),
        )  # fmt: skip
        now = timezone.now()
        items = [summary(s, now) for s in summaries]
        return Response({"items": items, "pagination": {"next_after": cursor}})

    def numbered(self, request: Any) -> Response:
        """``?page=&per_page=``, as the official admin UI asks: the tenants of that page
        and ``pagination: {page, per_page, total}`` (its ``total`` counts up to
        :data:`MAX_TOTAL` tenants, one index probe each)."""
        params = request.query_params
        page = _number(params, "page", 1, MAX_TOTAL)
        per_page = _number(params, "per_page", 50, MAX_PAGE)
        scope, using = self.tenant_scope(request), self.reading(request)
        known = lifecycle.tenant_ids(limit=MAX_TOTAL, using=using)
        if scope is not None:
            known = [t for t in known if t in set(scope)]
        shown = known[(page - 1) * per_page : page * per_page]
        before = known[(page - 1) * per_page - 1] if page > 1 and shown else ""
        summaries = (
            lifecycle.tenant_page(after=before, limit=per_page, tenants=shown, using=using)[0]
            if shown
            else []
        )
        now = timezone.now()
        return Response(
            {
                "items": [summary(s, now) for s in summaries],
                "pagination": {"page": page, "per_page": per_page, "total": len(known)},
            }
        )


class TenantDetailView(TenantView):
    """``GET`` (its configuration and statistics), ``PUT`` (``{"fairness_weight": n}``)
    and ``DELETE`` (forget its configuration) ``/admin/tenants/{id}``."""

    def get(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        stats = tenant_stats(tenant)
        return Response(
            {
                **stats,
                "fairness_weight": stats["fairness"]["weight"],
                "config": _config_of(tenant, stats["fairness"]["weight"]),
                "throttle": lifecycle.tenant_throttle(tenant),
            }
        )

    def put(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        body = self.body(request)
        weight, limits = _config(body, tenant)
        actor = self.actor(request)
        with transaction.atomic(using=lifecycle.database(None)):
            row, created = lifecycle.set_tenant(tenant, weight=weight, actor=actor)
            if limits is not None:
                lifecycle.set_limits(tenant, limits, reason=_reason(body), actor=actor)
        return Response(
            {**_config_of(tenant, row.weight), "created": created},
            status=201 if created else 200,
        )

    def delete(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        deleted = lifecycle.delete_tenant(tenant, actor=self.actor(request))
        return Response({"tenant_id": tenant, "deleted": deleted})


def tenant_stats(tenant: str) -> dict[str, Any]:
    """§10.2 as far as it is served: jobs by state (``available``, ``active``,
    ``scheduled``... each state), total, weight, limits, and the oldest waiting job."""
    stats = lifecycle.tenant_stats(tenant)
    return {**stats, **oldest(lifecycle.oldest_available(tenant), timezone.now())}


class TenantStatsView(TenantView):
    """``GET /admin/tenants/{id}/stats`` (§10.2): its jobs by state, total and weight."""

    def get(self, request: Any, tenant_id: str) -> Response:
        return Response(tenant_stats(self.tenant(request, tenant_id)))


class TenantJobsView(TenantView):
    """``GET /admin/tenants/{id}/jobs`` (§10.3): ``/admin/jobs?tenant={id}``."""

    def get(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        params = request.query_params
        jobs = jobquery.JobFilter.parse(params, extra=LIST_PARAMS).apply(self.jobs(request))
        jobs = jobs.filter(tenant=tenant).exclude(tenant="")
        jobs = jobquery.order(jobs, params)
        items, page = paginate(jobs, params, keyset=True)
        return Response({"items": [job_summary(j) for j in items], "pagination": page})


def _config_of(tenant: str, weight: float) -> dict[str, Any]:
    """A tenant's configuration in §8.1's form."""
    limits = lifecycle.limits_wire(tenant)
    return {
        "tenant_id": tenant,
        "limits": {k: v for k, v in limits.items() if k != "priority_boost"},
        "fairness_weight": weight,
        "priority_boost": limits["priority_boost"],
    }


class TenantLimitsView(TenantView):
    """``GET`` and ``PUT /admin/tenants/{id}/limits`` (§9.3): a tenant's limits; a PUT
    changes the fields it names (``null`` removes one) and may give a ``reason``, which
    the audit trail keeps."""

    def get(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        return Response({"tenant_id": tenant, **lifecycle.limits_wire(tenant)})

    def put(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        body = dict(self.body(request))
        reason = _reason(body)
        body.pop("reason", None)
        _, created = lifecycle.set_limits(tenant, body, reason=reason, actor=self.actor(request))
        return Response(
            {"tenant_id": tenant, **lifecycle.limits_wire(tenant), "created": created},
            status=201 if created else 200,
        )


class TenantThrottleView(TenantView):
    """``PUT /admin/tenants/{id}/throttle`` (§9.2-§9.3): throttle a tenant for a time
    (``{"weight": 0.2, "concurrency": 2, "duration": "PT10M", "reason": "…"}``, weight
    or concurrency or both); ``DELETE``: lift its throttle (§9.2: reversible)."""

    def get(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        return Response({"tenant_id": tenant, "throttle": lifecycle.tenant_throttle(tenant)})

    def put(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        body = self.body(request)
        unknown = sorted(set(body) - {"weight", "concurrency", "duration", "reason"})
        if unknown:
            raise ValidationError(f"Unknown field '{unknown[0]}'", field=unknown[0])
        duration = body.get("duration", "PT5M")
        try:
            seconds = parse_duration(duration, field_name="duration") / 1000
        except ValidationError as exc:
            raise ValidationError(exc.message, field="duration") from None
        reason = body.get("reason") or "manual"
        if reason != "manual" and isinstance(reason, str):
            reason = f"manual: {reason}"
        lifecycle.throttle_tenant(
            tenant, weight=body.get("weight"), concurrency=body.get("concurrency"),
            seconds=seconds, reason=reason, actor=self.actor(request),
        )  # fmt: skip
        return Response({"tenant_id": tenant, "throttle": lifecycle.tenant_throttle(tenant)})

    def delete(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        released = lifecycle.release_throttle(tenant, actor=self.actor(request))
        return Response({"tenant_id": tenant, "released": released})
