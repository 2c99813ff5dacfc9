"""The dead letter: discarded jobs in their own admin entry, with retry and purge.

A view over ``DeadLetterJob`` (a proxy of ``Job`` restricted to ``discarded``). Retry is
``lifecycle.retry_discarded``, purge is ``lifecycle.delete_discarded``; permissions are the
job permissions ``ojs.retry_job`` and ``ojs.purge_job``.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.safestring import SafeString

from django_ojs.admin import display
from django_ojs.admin.base import read_alias
from django_ojs.admin.jobs import JobAdmin, QueueFilter, TypeFilter
from django_ojs.models import DeadLetterJob, Job


class ErrorTypeFilter(admin.SimpleListFilter):
    title = "error type"
    parameter_name = "error_type"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Job]
    ) -> list[tuple[str, str]]:
        # The error types of the newest 10,000 dead letters: not a DISTINCT over them all.
        recent = (
            DeadLetterJob.objects.using(read_alias(request))
            .order_by("-discarded_at")
            .values_list("error__type", flat=True)[:10_000]
        )
        return [(str(t), str(t)) for t in sorted({t for t in recent if t})]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        if self.value():
            return queryset.filter(error__type=self.value())
        return queryset


@admin.register(DeadLetterJob)
class DeadLetterJobAdmin(JobAdmin):
    """Dead-lettered jobs with their last error; retry or purge them."""

    list_display = (
        "id",
        "type",
        "queue",
        "attempts",
        "discarded",
        "last_error_type",
        "last_error_message",
    )
    list_filter = (
        QueueFilter, TypeFilter, ErrorTypeFilter, ("discarded_at", admin.DateFieldListFilter),
    )  # fmt: skip
    actions = ("retry_jobs", "purge_dead_letter")
    ordering = ("-discarded_at",)

    # Anyone who may see jobs may see the dead letter (the proxy's own view
    # permission works too), so one set of job permissions covers the console.
    def has_view_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return request.user.has_perm("ojs.view_job") or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_module_perms("ojs")

    @admin.display(description="discarded", ordering="discarded_at")
    def discarded(self, obj: Job) -> SafeString | str:
        return display.compact_time(obj.discarded_at)

    @admin.display(description="error")
    def last_error_message(self, obj: Job) -> str:
        return display.error_message(obj.error)

    @admin.action(description="Purge selected dead-lettered jobs", permissions=["purge"])
    def purge_dead_letter(
        self, request: HttpRequest, queryset: QuerySet[Job]
    ) -> HttpResponse | None:
        return self.run_action(request, queryset, "purge_dead_letter")
