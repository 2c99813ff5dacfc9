"""Admin API tenants (OJS multi-tenancy §10): list, detail, configure, forget, statistics,
and a tenant's jobs.

A key limited to some tenants sees and changes only those. Limits (``/limits``,
§8-§9) are not served yet.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import jobquery, lifecycle
from django_ojs.api.permissions import MANAGE
from django_ojs.api.views.admin import LIST_PARAMS, AdminView, job_summary, paginate
from django_ojs.exceptions import ValidationError
from django_ojs.tenancy import validate_tenant

#: Most tenants one page of ``GET /admin/tenants`` lists.
MAX_PAGE = 500


class TenantView(AdminView):
    def tenant(self, request: Any, tenant_id: str) -> str:
        """The path's tenant (400 when malformed), 403 outside the caller's tenants."""
        tenant = validate_tenant(tenant_id, field="tenant_id")
        self.principal(request).require_tenant(tenant, MANAGE)
        return tenant


def _weight(body: dict[str, Any]) -> Any:
    """The weight a PUT sets: ``fairness_weight`` (§8.1), or ``weight``."""
    unknown = sorted(set(body) - {"fairness_weight", "weight", "tenant_id"})
    if unknown:
        raise ValidationError(f"Unknown field '{unknown[0]}'", field=unknown[0])
    return body.get("fairness_weight", body.get("weight", 1.0))


class TenantsView(TenantView):
    """``GET /admin/tenants?after=&limit=``: tenants in name order, with their weights."""

    def get(self, request: Any) -> Response:
        params = request.query_params
        after = params.get("after") or ""
        if after:
            validate_tenant(after, field="after")
        try:
            limit = int(params.get("limit") or 100)
        except ValueError:
            raise ValidationError("limit must be a whole number", field="limit") from None
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
        ids = lifecycle.tenant_ids(after=after, limit=limit)
        scope = self.tenant_scope(request)
        if scope is not None:
            ids = [t for t in ids if t in scope]
        items = [{"tenant_id": t, "fairness_weight": lifecycle.weight_of(t)} for t in ids]
        more = len(ids) == limit
        return Response({"items": items, "pagination": {"next_after": ids[-1] if more else None}})


class TenantDetailView(TenantView):
    """``GET`` (its configuration and statistics), ``PUT`` (``{"fairness_weight": n}``)
    and ``DELETE`` (forget its configuration) ``/admin/tenants/{id}``."""

    def get(self, request: Any, tenant_id: str) -> Response:
        stats = lifecycle.tenant_stats(self.tenant(request, tenant_id))
        return Response({**stats, "fairness_weight": stats["fairness"]["weight"]})

    def put(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        weight = _weight(self.body(request))
        row, created = lifecycle.set_tenant(tenant, weight=weight, actor=self.actor(request))
        return Response(
            {"tenant_id": row.tenant_id, "fairness_weight": row.weight, "created": created},
            status=201 if created else 200,
        )

    def delete(self, request: Any, tenant_id: str) -> Response:
        tenant = self.tenant(request, tenant_id)
        deleted = lifecycle.delete_tenant(tenant, actor=self.actor(request))
        return Response({"tenant_id": tenant, "deleted": deleted})


class TenantStatsView(TenantView):
    """``GET /admin/tenants/{id}/stats`` (§10.2): its jobs by state, total and weight."""

    def get(self, request: Any, tenant_id: str) -> Response:
        return Response(lifecycle.tenant_stats(self.tenant(request, tenant_id)))


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
