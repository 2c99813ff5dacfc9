"""The workers admin: who is running, what they hold, and quiet / terminate directives.

Worker rows are written by the worker protocol (register, BEAT) only, so they are
read-only here. A directive is set through ``lifecycle.set_directive`` and reaches the
worker in its next heartbeat reply.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_ojs import lifecycle
from django_ojs.actors import Actor
from django_ojs.admin import bulk, display
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.conf import settings
from django_ojs.models import Job, Worker
from django_ojs.states import JobState


def stale_before(now: datetime | None = None) -> datetime:
    """Workers whose last heartbeat is older than this are flagged stale."""
    return (now or timezone.now()) - timedelta(seconds=settings.WORKER_STALE_AFTER)


class StaleFilter(admin.SimpleListFilter):
    title = "heartbeat"
    parameter_name = "stale"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Worker]
    ) -> list[tuple[str, str]]:
        return [("no", "Alive"), ("yes", "Stale")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        if self.value() == "yes":
            return queryset.filter(last_heartbeat_at__lt=stale_before())
        if self.value() == "no":
            return queryset.filter(last_heartbeat_at__gte=stale_before())
        return queryset


def _directive(value: str, actor: Actor) -> Callable[[str], str | None]:
    def run(worker_id: str) -> str | None:
        lifecycle.set_directive(worker_id, value, actor=actor)
        return None

    return run


#: action name → (directive, title, question, past tense, button)
DIRECTIVES: dict[str, tuple[str, str, str, str, str]] = {
    "quiet_workers": (
        "quiet",
        "Quiet workers",
        "Quiet these workers? They finish the jobs they hold and fetch no new ones.",
        "asked to go quiet",
        "quiet",
    ),
    "terminate_workers": (
        "terminate",
        "Terminate workers",
        "Terminate these workers? They shut down gracefully, as on SIGTERM: they fetch "
        "nothing new and exit once their running jobs are done.",
        "asked to terminate",
        "terminate",
    ),
    "resume_workers": (
        "running",
        "Resume workers",
        "Clear the directive of these workers so they fetch jobs again?",
        "resumed",
        "resume",
    ),
}


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin[Worker]):
    list_display = (
        "id",
        "hostname",
        "pid",
        "pool",
        "queue_list",
        "concurrency",
        "reported_state",
        "requested",
        "active_jobs",
        "heartbeat",
        "started",
    )
    list_filter = ("state", "directive", "pool", StaleFilter)
    search_fields = ("id", "hostname", "pool")
    actions = ("quiet_workers", "terminate_workers", "resume_workers")
    fields = ("id", "hostname", "pid", "pool", "queue_list", "concurrency", "labels", "reported_state",
              "requested", "active_jobs", "held_jobs", "heartbeat", "started_at")  # fmt: skip
    readonly_fields = fields

    reads_from_replica = True

    def has_direct_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.direct_worker")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        held = (
            Job.objects.filter(state=JobState.ACTIVE, worker_id=OuterRef("id"))
            .order_by()
            .values("worker_id")
            .annotate(n=Count("id"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(n_active=Coalesce(Subquery(held, output_field=IntegerField()), 0))
        )

    @admin.display(description="queues")
    def queue_list(self, obj: Worker) -> str:
        return ", ".join(str(q) for q in obj.queues or []) or "—"

    @admin.display(description="state", ordering="state")
    def reported_state(self, obj: Worker) -> str:
        return obj.state

    @admin.display(description="directive", ordering="directive")
    def requested(self, obj: Worker) -> SafeString | str:
        if not obj.directive:
            return "—"
        if obj.directive == obj.state:
            return obj.directive
        return format_html("{} <em>(pending)</em>", obj.directive)

    @admin.display(description="active jobs", ordering="n_active")
    def active_jobs(self, obj: Worker) -> SafeString | str:
        count = getattr(obj, "n_active", 0)
        if not count:
            return "0"
        url = reverse("admin:ojs_job_changelist")
        return format_html(
            '<a href="{}?worker_id={}&amp;state__exact=active">{}</a>', url, obj.id, count
        )

    @admin.display(description="held jobs")
    def held_jobs(self, obj: Worker) -> SafeString | str:
        jobs = (
            Job.objects.using(obj._state.db)
            .filter(state=JobState.ACTIVE, worker_id=obj.id)
            .values_list("pk", "type")[:100]
        )
        if not jobs:
            return "—"
        return format_html_join(
            "",
            '<div><a href="{}">{}</a> {}</div>',
            ((reverse("admin:ojs_job_change", args=[pk]), pk, type_) for pk, type_ in jobs),
        )

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Worker) -> SafeString | str:
        return display.compact_time(obj.started_at)

    @admin.display(description="last heartbeat", ordering="last_heartbeat_at")
    def heartbeat(self, obj: Worker) -> SafeString:
        ago = display.seconds_ago(obj.last_heartbeat_at) or 0.0
        label = f"{display.humanize_seconds(ago)} ago"
        if obj.last_heartbeat_at < stale_before():
            return format_html('<span class="ojs-flag-stale" title="{}">⚠ stale: {}</span>',
                               obj.last_heartbeat_at.isoformat(), label)  # fmt: skip
        return format_html('<span title="{}">{}</span>', obj.last_heartbeat_at.isoformat(), label)

    def run_directive(
        self, request: HttpRequest, queryset: QuerySet[Worker], name: str
    ) -> TemplateResponse | None:
        value, title, question, past, button = DIRECTIVES[name]
        workers = list(queryset.values_list("id", "hostname", "pid", "state", "directive"))
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request,
                self,
                action=name,
                title=title,
                question=question,
                headers=("worker", "hostname", "pid", "state", "directive"),
                rows=[bulk.ConfirmRow(str(w[0]), w) for w in workers],
                submit_label=f"Yes, {button} {len(workers)} "
                + ("worker" if len(workers) == 1 else "workers"),
                danger=value == "terminate",
            )
        outcome = bulk.apply(
            ((w[0], w[0]) for w in workers),
            _directive(value, admin_actor(request)),
            gone=bulk.gone(request, (w[0] for w in workers)),
        )
        if outcome.done and value != "running":
            past += " (delivered in their next heartbeat reply)"
        self.message_user(request, outcome.message(past), outcome.level)
        return None

    @admin.action(description="Quiet selected workers (stop fetching)", permissions=["direct"])
    def quiet_workers(
        self, request: HttpRequest, queryset: QuerySet[Worker]
    ) -> TemplateResponse | None:
        return self.run_directive(request, queryset, "quiet_workers")

    @admin.action(description="Terminate selected workers", permissions=["direct"])
    def terminate_workers(
        self, request: HttpRequest, queryset: QuerySet[Worker]
    ) -> TemplateResponse | None:
        return self.run_directive(request, queryset, "terminate_workers")

    @admin.action(description="Resume selected workers (clear directive)", permissions=["direct"])
    def resume_workers(
        self, request: HttpRequest, queryset: QuerySet[Worker]
    ) -> TemplateResponse | None:
        return self.run_directive(request, queryset, "resume_workers")
