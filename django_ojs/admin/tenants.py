"""Tenants in the Django admin: every tenant's jobs, and their fairness weights (fair
scheduling §9.2) and limits (multi-tenancy §8.1).

The list is a page of its own: every tenant that jobs name or that is configured, in
name order, a page at a time (``?after=``: keyset, like ``GET /admin/tenants``), each
with its jobs by state, running jobs, the job that has waited longest, its weight and
its limits (``lifecycle.tenant_page``; a page reads a bounded number of index entries
whatever the table holds, docs/how-to/run-jobs-for-tenants.md). It reads from the
replica when there is one (``OJS_READ_DATABASE``).

A row is a tenant's configuration; saving and deleting go through ``lifecycle``
(``set_tenant``, ``delete_tenant``), which record them in the audit trail.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote as admin_quote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_ojs import lifecycle
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor, read_alias, replica_context
from django_ojs.admin.display import humanize_seconds
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job, Tenant
from django_ojs.tenancy import validate_tenant

#: Tenants on one page of the tenants list.
PAGE_SIZE = 100
#: The columns of jobs by state, in the order a job lives them ("running" is ``active``).
STATE_COLUMNS = (
    ("available", "available"),
    ("scheduled", "scheduled"),
    ("retryable", "retryable"),
    ("pending", "pending"),
    ("active", "running"),
    ("completed", "completed"),
    ("discarded", "discarded"),
    ("cancelled", "cancelled"),
)


def _count_cells(counts: list[tuple[int, bool, str]]) -> SafeString:
    """The ``<td>`` of each count: a link to its jobs (``~`` before an estimate), or 0."""
    zero = mark_safe('<td><span class="ojs-zero">0</span></td>')
    return format_html_join(
        "",
        "{}",
        (
            (format_html('<td><a href="{}">{}{}</a></td>', url, "~" if estimated else "", n),)
            if n
            else (zero,)
            for n, estimated, url in counts
        ),
    )


def _limits_text(limits: dict[str, Any]) -> str:
    """A tenant's limits for a cell, what it uses of each: ``max_concurrency 8/20,
    max_queue_depth 57/50000, max_enqueue_rate 100/PT60S``."""
    parts = []
    for name, value in limits.items():
        if isinstance(value, dict) and "current" in value:
            parts.append(f"{name} {value['current']}/{value['limit']}")
        elif isinstance(value, dict) and "period" in value:
            parts.append(f"{name} {value['limit']}/{value['period']}")
        else:
            parts.append(f"{name} {value}")
    return ", ".join(parts)


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
    """Every tenant with its jobs (a page of its own), and the configured ones' forms."""

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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":
            # An action on configured tenants (lift throttles, delete): Django's changelist
            # runs it on the Tenant rows selected, then comes back here.
            return super().changelist_view(request, extra_context)
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        after = request.GET.get("after", "")
        error = ""
        if after:
            try:
                after = validate_tenant(after, field="after")
            except ValidationError as exc:
                error, after = exc.message, ""
        summaries, cursor = lifecycle.tenant_page(
            after=after, limit=PAGE_SIZE, using=read_alias(request)
        )
        now = timezone.now()
        base = reverse("admin:ojs_tenant_changelist")
        # Each reverse() walks the URL patterns (0.1 ms): once per page, not per cell.
        job_list = reverse("admin:ojs_job_changelist")
        job_page = reverse("admin:ojs_job_change", args=["JOB"])
        change_page = reverse("admin:ojs_tenant_change", args=["TENANT"])
        add_page = reverse("admin:ojs_tenant_add")
        rows = []
        for item in summaries:
            waiting = item.oldest_available
            tenant = quote(item.tenant_id, safe="")
            counts = [
                (
                    item.jobs[state],
                    state in item.estimated,
                    f"{job_list}?tenant={tenant}&state__exact={state}",
                )
                for state, _ in STATE_COLUMNS
            ]
            rows.append(
                {
                    "tenant": item.tenant_id,
                    "configured": item.configured,
                    "change_url": change_page.replace("TENANT", admin_quote(item.tenant_id))
                    if item.configured
                    else "",
                    "add_url": f"{add_page}?tenant_id={tenant}",
                    "weight": item.weight,
                    "limits": _limits_text(item.limits),
                    "counts": counts,
                    # Built here, not in the template: 800 cells a page cost the template
                    # engine about 100 ms (a lookup and a localisation per value).
                    "cells": _count_cells(counts),
                    "total": item.total,
                    "estimated": bool(item.estimated),
                    "oldest": None
                    if waiting is None
                    else {
                        "age": humanize_seconds(waiting.age(now)),
                        "since": waiting.since.strftime("%Y-%m-%d %H:%M:%S"),
                        "queue": waiting.queue,
                        "url": job_page.replace("JOB", waiting.job_id),
                    },
                    "jobs_url": f"{job_list}?tenant={tenant}",
                }
            )
        context = {
            **self.admin_site.each_context(request),
            **replica_context(request),
            "title": "Tenants",
            "subtitle": None,
            "opts": self.model._meta,
            "app_label": self.model._meta.app_label,
            "columns": [label for _, label in STATE_COLUMNS],
            "rows": rows,
            "after": after,
            "error": error,
            "first_url": base if after else "",
            "next_url": f"{base}?{urlencode({'after': cursor})}" if cursor else "",
            "exact_up_to": lifecycle.PAGE_EXACT_COUNT_UP_TO,
            "has_add_permission": self.has_add_permission(request),
            "actions": self.get_action_choices(request, default_choices=[]),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "add_url": reverse("admin:ojs_tenant_add"),
            "media": self.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ojs/tenant/change_list.html", context)

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
