"""The audit trail (OJS security §11): who cancelled, retried, purged, paused... read-only.

Rows are written by the lifecycle in the action's own transaction; this admin only lists
them, filtered by actor, action, source and date. Nobody adds, changes or deletes one here.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_ojs.admin.base import ReadOnlyAdmin
from django_ojs.models import AuditEntry


class ActorFilter(admin.SimpleListFilter):
    title = "actor"
    parameter_name = "actor"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[AuditEntry]
    ) -> list[tuple[str, str]]:
        actors = AuditEntry.objects.order_by("actor").values_list("actor", flat=True).distinct()
        return [(a, a) for a in actors[:100]]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[AuditEntry]
    ) -> QuerySet[AuditEntry]:
        if self.value():
            return queryset.filter(actor=self.value())
        return queryset


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin[AuditEntry]):
    list_display = ("time", "actor", "action", "source", "queue", "jobs", "worker_id")
    list_filter = ("action", ActorFilter, "source", ("time", admin.DateFieldListFilter))
    search_fields = ("actor", "action", "queue", "worker_id", "request_id")
    date_hierarchy = "time"
    readonly_fields = (
        "time", "actor", "source", "action", "queue", "job_ids", "worker_id", "detail",
        "source_ip", "request_id",
    )  # fmt: skip
    fields = readonly_fields

    @admin.display(description="jobs")
    def jobs(self, obj: AuditEntry) -> str:
        ids = obj.job_ids or []
        shown = ", ".join(str(i) for i in ids[:3])
        return f"{shown} and {len(ids) - 3} more" if len(ids) > 3 else shown
