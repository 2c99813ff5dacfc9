"""Tenants in the Django admin: their fairness weights (fair scheduling §9.2) and limits
(multi-tenancy §8.1).

A row is a tenant's configuration; saving and deleting go through ``lifecycle``
(``set_tenant``, ``delete_tenant``), which record them in the audit trail.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from django_ojs import lifecycle
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.models import Job, Tenant


class TenantFilter(admin.SimpleListFilter):
    """By tenant: the menu lists the configured tenants (``Tenant`` rows, a small table);
    any other tenant is one search away (``tenant:acme``). Reads ojs_job_tenant_idx."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Job]
    ) -> list[tuple[str, str]]:
        choices = list(Tenant.objects.values_list("tenant_id", flat=True)[:200])
        value = self.value()
        if value and value not in choices:
            choices.append(value)  # a tenant without a configuration, from a link
        return [(t, t) for t in choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(tenant=value).exclude(tenant="") if value else queryset


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin[Tenant]):
    list_display = ("tenant_id", "weight", "max_concurrency", "max_queue_depth", "updated_at")
    search_fields = ("tenant_id",)
    fields = (
        "tenant_id",
        "weight",
        "max_concurrency",
        "max_queue_depth",
        "max_scheduled",
        ("enqueue_rate_limit", "enqueue_rate_period_ms"),
        "priority_boost",
        "quota",
        ("throttled_weight", "throttled_concurrency", "throttled_until", "throttle_reason"),
        "created_at",
        "updated_at",
    )
    #: Throttles (noisy neighbours, §9.2) are set by the reaper's detection or the admin
    #: API's ``PUT …/throttle``; here they are shown, and lifted by the action.
    readonly_fields = (
        "created_at",
        "updated_at",
        "throttled_weight",
        "throttled_concurrency",
        "throttled_until",
        "throttle_reason",
    )
    actions = ("release_throttles",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.add_tenant")

    def has_change_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return request.user.has_perm("ojs.change_tenant")

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return request.user.has_perm("ojs.delete_tenant")

    def get_readonly_fields(self, request: HttpRequest, obj: Tenant | None = None) -> Any:
        return self.readonly_fields if obj is None else ("tenant_id", *self.readonly_fields)

    def save_model(
        self, request: HttpRequest, obj: Tenant, form: ModelForm[Tenant], change: bool
    ) -> None:
        actor = admin_actor(request)
        rate = None
        if obj.enqueue_rate_limit is not None:
            period = obj.enqueue_rate_period_ms or 1000
            rate = {"limit": obj.enqueue_rate_limit, "period": f"PT{period / 1000:g}S"}
        limits = {
            "max_concurrency": obj.max_concurrency,
            "max_queue_depth": obj.max_queue_depth,
            "max_scheduled": obj.max_scheduled,
            "max_enqueue_rate": rate,
            "priority_boost": obj.priority_boost,
            "quota": obj.quota,
        }
        with transaction.atomic(using=lifecycle.database(None)):
            lifecycle.set_tenant(obj.tenant_id, weight=obj.weight, actor=actor)
            saved, _ = lifecycle.set_limits(obj.tenant_id, limits, actor=actor)
        obj.created_at, obj.updated_at = saved.created_at, saved.updated_at
        obj._state.adding = False
        obj._state.db = saved._state.db

    def delete_model(self, request: HttpRequest, obj: Tenant) -> None:
        lifecycle.delete_tenant(obj.tenant_id, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        for tenant_id in queryset.values_list("tenant_id", flat=True):
            lifecycle.delete_tenant(tenant_id, actor=admin_actor(request))

    @admin.action(description="Lift the selected tenants' throttles", permissions=["change"])
    def release_throttles(self, request: HttpRequest, queryset: QuerySet[Tenant]) -> None:
        lifted = sum(
            lifecycle.release_throttle(tenant_id, actor=admin_actor(request))
            for tenant_id in queryset.values_list("tenant_id", flat=True)
        )
        self.message_user(request, f"Lifted {lifted} throttle(s).")
