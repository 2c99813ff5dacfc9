"""The jobs admin: a read-only changelist and detail page, and the operator actions.

Each action confirms, then calls one ``django_ojs.lifecycle`` operation per selected job;
the lifecycle refuses jobs in the wrong state and the refusal is reported per job. Jobs
cannot be added, edited or deleted here (``purge`` is the lifecycle's delete).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten_fieldsets, quote
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_ojs import jobquery, lifecycle, states
from django_ojs import queues as queue_ops
from django_ojs.actors import Actor
from django_ojs.admin import bulk, display
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor, read_alias
from django_ojs.admin.paginator import EstimatedCountPaginator
from django_ojs.admin.tenants import TenantFilter
from django_ojs.conf import settings
from django_ojs.exceptions import JobNotFound, OJSError
from django_ojs.models import Event, Job, Worker
from django_ojs.states import JobState
from django_ojs.types import JobId

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec

#: Timestamps shown on a job's page when set.
TIMES = ("created_at", "scheduled_at", "enqueued_at", "started_at", "next_attempt_at",
         "completed_at", "cancelled_at", "discarded_at", "expires_at")  # fmt: skip
#: Events listed on a job's page (heartbeats are summarised, not listed).
TIMELINE_LIMIT = 500
#: Jobs acted on per request when an action runs on every job matching a filter.
ACROSS_BATCH = 200


def _who(request: HttpRequest) -> Actor:
    return admin_actor(request)


def _state_of(pk: JobId) -> str | None:
    return Job.objects.filter(pk=pk).values_list("state", flat=True).first()


def _refused_by_state(pk: JobId) -> str:
    state = _state_of(pk)
    return bulk.state_reason(state) if state else "no longer exists"


def _cancel(request: HttpRequest, pk: JobId) -> str | None:
    job = lifecycle.cancel(pk, actor=_who(request), reason="Cancelled from the admin")
    # Cancelling a cancelled job succeeds without a change (OJS core §7.6.4): report it.
    return "already cancelled" if job.previous_state == JobState.CANCELLED else None


def _retry(request: HttpRequest, pk: JobId) -> str | None:
    lifecycle.retry_discarded(pk, actor=_who(request))
    return None


def _discard(request: HttpRequest, pk: JobId) -> str | None:
    lifecycle.discard(pk, actor=_who(request), reason="Discarded from the admin")
    return None


def _run_now(request: HttpRequest, pk: JobId) -> str | None:
    lifecycle.run_now(pk, actor=_who(request))
    return None


def _purge(request: HttpRequest, pk: JobId) -> str | None:
    return None if lifecycle.purge([pk], actor=_who(request)) else _refused_by_state(pk)


def _delete_discarded(request: HttpRequest, pk: JobId) -> str | None:
    try:
        lifecycle.delete_discarded(pk, actor=_who(request))
    except JobNotFound:
        return _refused_by_state(pk)
    return None


@dataclass(frozen=True)
class JobAction:
    """An operator action on jobs: its wording, the states it applies to, its core call."""

    title: str
    question: str
    past: str
    button: str
    applies_to: frozenset[str]
    run: Callable[[HttpRequest, JobId], str | None]
    danger: bool = False


ACTIONS: dict[str, JobAction] = {
    "cancel_jobs": JobAction(
        "Cancel jobs",
        "Cancel these jobs? Active ones are cancelled at once and their worker is told "
        "in its next heartbeat reply.",
        "cancelled",
        "Cancel",
        states.allowed_from("cancel"),
        _cancel,
        danger=True,
    ),
    "retry_jobs": JobAction(
        "Retry jobs",
        "Retry these dead-lettered jobs? They become available with their attempts reset.",
        "retried",
        "Retry",
        states.allowed_from("retry_discarded"),
        _retry,
    ),
    "discard_jobs": JobAction(
        "Discard jobs",
        "Discard these jobs? They stop now and go to the dead letter.",
        "discarded",
        "Discard",
        states.allowed_from("discard"),
        _discard,
        danger=True,
    ),
    "run_jobs_now": JobAction(
        "Run jobs now",
        "Make these scheduled or retryable jobs available now?",
        "made available",
        "Run now",
        states.allowed_from("run_now"),
        _run_now,
    ),
    "purge_jobs": JobAction(
        "Purge jobs",
        "Delete these finished jobs for good? Unfinished jobs are left alone.",
        "purged",
        "Purge",
        states.TERMINAL_STATES,
        _purge,
        danger=True,
    ),
    "purge_dead_letter": JobAction(
        "Purge dead-lettered jobs",
        "Delete these dead-lettered jobs for good?",
        "purged",
        "Purge",
        frozenset({JobState.DISCARDED}),
        _delete_discarded,
        danger=True,
    ),
}


def confirm_rows(action: JobAction, rows: list[tuple[Any, ...]]) -> list[bulk.ConfirmRow]:
    """A confirmation page's lines for ``(pk, type, queue, state)`` rows, with the skips."""
    return [
        bulk.ConfirmRow(
            str(pk),
            (pk, type_, queue, display.state_badge(state)),
            "" if state in action.applies_to else f"will be skipped: {bulk.state_reason(state)}",
        )
        for pk, type_, queue, state in rows
    ]


class QueueFilter(admin.SimpleListFilter):
    """By queue: the menu lists the registered queues (a small table), never
    ``SELECT DISTINCT queue`` over every job."""

    title = "queue"
    parameter_name = "queue"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Job]
    ) -> list[tuple[str, str]]:
        return [(q.name, q.name) for q in queue_ops.list_queues(using=read_alias(request))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class TypeFilter(admin.SimpleListFilter):
    """By job type: the menu comes from an index skip scan (``jobquery.distinct_types``)."""

    title = "type"
    parameter_name = "type"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Job]
    ) -> list[tuple[str, str]]:
        return [(t, t) for t in jobquery.distinct_types(Job.objects.using(read_alias(request)))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(type=self.value()) if self.value() else queryset


class FinishedFilter(admin.SimpleListFilter):
    """When the job finished (completed, discarded or cancelled)."""

    title = "finished"
    parameter_name = "finished"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Job]
    ) -> list[tuple[str, str]]:
        return [("1h", "Past hour"), ("24h", "Past 24 hours"), ("7d", "Past 7 days"),
                ("30d", "Past 30 days"), ("no", "Not finished")]  # fmt: skip

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value == "no":
            return queryset.filter(completed_at__isnull=True, cancelled_at__isnull=True)
        spans = {"1h": timedelta(hours=1), "24h": timedelta(days=1),
                 "7d": timedelta(days=7), "30d": timedelta(days=30)}  # fmt: skip
        if value in spans:
            since = timezone.now() - spans[value]
            return queryset.filter(Q(completed_at__gte=since) | Q(cancelled_at__gte=since))
        return queryset


#: ``key:value`` filters the job list's search box understands (``django_ojs.jobquery``).
SEARCH_KEYS = {"type": "type", "args": "args", "meta": "meta", "error": "error_type",
               "worker": "worker", "queue": "queue", "state": "state",
               "tenant": "tenant"}  # fmt: skip
SEARCH_KEY = re.compile(rf"({'|'.join(SEARCH_KEYS)}):\S")
SEARCH_SPLIT = re.compile(rf"\s+(?=(?:{'|'.join(SEARCH_KEYS)}):)")


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin[Job]):
    """Every job: filter, search, inspect, and act through the lifecycle."""

    reads_from_replica = True

    list_display: tuple[str, ...] = (
        "id",
        "type",
        "queue",
        "tenant",
        "state_badge",
        "attempts",
        "priority",
        "scheduled",
        "started",
        "finished_at",
        "last_error_type",
    )
    list_filter: ClassVar[
        tuple[str | type[admin.SimpleListFilter] | tuple[str, type[admin.FieldListFilter]], ...]
    ] = (
        "state",
        QueueFilter,
        TenantFilter,
        TypeFilter,
        ("created_at", admin.DateFieldListFilter),
        FinishedFilter,
    )
    search_fields = ("type",)
    search_help_text = (
        'A job id, a type, or filters: type:email.* args:[{"order_id": 42}] tenant:acme '
        'meta:{"region": "eu"} error:SMTPError worker:<id> (combine them with spaces).'
    )
    list_per_page = 50
    show_full_result_count = False  # no COUNT(*) over a large job table on every page
    paginator = EstimatedCountPaginator  # nor of a large filtered result
    actions: tuple[str, ...] = (
        "cancel_jobs",
        "retry_jobs",
        "discard_jobs",
        "run_jobs_now",
        "purge_jobs",
    )
    change_form_template = "admin/ojs/job/change_form.html"
    change_list_template = "admin/ojs/job/change_list.html"
    fieldsets = (
        (None, {"fields": ("id", "type", "queue", "tenant", "state_badge", "priority",
                           "attempts", "tags", "dead_letter")}),
        ("Times", {"fields": TIMES}),
        ("Payload", {"fields": ("args_json", "meta_json", "result_json")}),
        ("Errors", {"fields": ("error_history",)}),
        ("Events", {"fields": ("events_timeline",)}),
        ("Worker", {"fields": ("worker_link", "heartbeat_at", "visible_until", "timeout_at")}),
        ("Policy", {"classes": ("collapse",),
                    "fields": ("retry_json", "unique_json", "unique_key", "timeouts", "extra_json")}),
    )  # fmt: skip

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.cancel_job")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.retry_job")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.discard_job")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.run_job_now")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.purge_job")

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> _FieldsetSpec:
        # Only the timestamps a job has: a waiting job has no started or finished time.
        return [
            (name, {**options, "fields": [f for f in options["fields"] if f not in TIMES
                                          or (obj is not None and getattr(obj, f) is not None)]})
            for name, options in self.fieldsets
        ]  # fmt: skip

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return flatten_fieldsets(self.fieldsets)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        parts = [p.strip() for p in SEARCH_SPLIT.split(term) if p.strip()]
        if all(SEARCH_KEY.match(p) for p in parts):
            params: dict[str, str] = {}
            for part in parts:
                key, _, value = part.partition(":")
                params[SEARCH_KEYS[key]] = value.strip()
            try:
                return jobquery.JobFilter.parse(params).apply(queryset), False
            except OJSError as exc:
                self.message_user(request, f"Search: {exc.message}", messages.ERROR)
                return queryset.none(), False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            return queryset.filter(type__icontains=term), False

    # -- columns ---------------------------------------------------------------------------

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Job) -> SafeString:
        return display.state_badge(obj.state)

    @admin.display(description="attempt")
    def attempts(self, obj: Job) -> str:
        return f"{obj.attempt} / {obj.max_attempts}"

    @admin.display(description="scheduled", ordering="scheduled_at")
    def scheduled(self, obj: Job) -> SafeString | str:
        return display.compact_time(obj.scheduled_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: Job) -> SafeString | str:
        return display.compact_time(obj.started_at)

    @admin.display(description="finished", ordering="completed_at")
    def finished_at(self, obj: Job) -> SafeString | str:
        return display.compact_time(obj.completed_at or obj.cancelled_at)

    @admin.display(description="last error")
    def last_error_type(self, obj: Job) -> str:
        return display.error_type(obj.error)

    # -- detail page -----------------------------------------------------------------------

    @admin.display(description="args")
    def args_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.args)

    @admin.display(description="meta")
    def meta_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.meta)

    @admin.display(description="result")
    def result_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.result)

    @admin.display(description="retry policy")
    def retry_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.retry)

    @admin.display(description="unique")
    def unique_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.unique)

    @admin.display(description="unknown attributes")
    def extra_json(self, obj: Job) -> SafeString:
        return display.pretty_json(obj.extra)

    @admin.display(description="timeouts (ms)")
    def timeouts(self, obj: Job) -> SafeString:
        names = ("timeout_ms", "visibility_timeout_ms", "total_timeout_ms", "enqueue_ttl_ms",
                 "grace_period_ms", "heartbeat_timeout_ms")  # fmt: skip
        return display.pretty_json({name: getattr(obj, name) for name in names})

    @admin.display(description="error history")
    def error_history(self, obj: Job) -> SafeString:
        errors = [e for e in (obj.errors or []) if isinstance(e, dict)]
        return render_to_string(
            "admin/ojs/job/error_history.html",
            {"errors": list(reversed(errors)), "current": obj.error},
        )

    @admin.display(description="timeline")
    def events_timeline(self, obj: Job) -> SafeString:
        rows = Event.objects.using(obj._state.db).filter(job_id=obj.pk)  # where obj was read
        heartbeats = rows.filter(type="job.heartbeat")
        listed = list(rows.exclude(type="job.heartbeat").order_by("-seq")[:TIMELINE_LIMIT])
        return render_to_string(
            "admin/ojs/job/events.html",
            {
                "events": list(reversed(listed)),
                "truncated": len(listed) == TIMELINE_LIMIT,
                "heartbeats": heartbeats.count(),
                "last_heartbeat": heartbeats.order_by("-seq").values_list("time", flat=True)
                .first(),
                "store_events": settings.STORE_EVENTS,
            },
        )  # fmt: skip

    @admin.display(description="worker")
    def worker_link(self, obj: Job) -> SafeString | str:
        if not obj.worker_id:
            return "—"
        if Worker.objects.using(obj._state.db).filter(pk=obj.worker_id).exists():
            try:
                url = reverse("admin:ojs_worker_change", args=[quote(obj.worker_id)])
            except NoReverseMatch:
                return obj.worker_id
            return format_html('<a href="{}">{}</a>', url, obj.worker_id)
        return format_html("{} <em>(no longer registered)</em>", obj.worker_id)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            dashboard = reverse(f"{self.admin_site.name}:ojs_dashboard_changelist")
        except NoReverseMatch:  # the dashboard is not registered on this admin site
            dashboard = ""
        return super().changelist_view(
            request,
            {
                "ojs_dashboard_url": dashboard,
                "ojs_refresh_seconds": settings.ADMIN_REFRESH_SECONDS,
                **(extra_context or {}),
            },
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, object_id)
        extra_context = {**(extra_context or {}), "ojs_actions": self.object_actions(request, obj)}
        return super().change_view(request, object_id, form_url, extra_context)

    def object_actions(self, request: HttpRequest, obj: Job | None) -> list[tuple[str, str, bool]]:
        """``(action, button label, danger)`` for the detail page buttons that apply."""
        if obj is None:
            return []
        allowed = self.get_actions(request)
        return [
            (name, ACTIONS[name].button, ACTIONS[name].danger)
            for name in self.actions
            if name in allowed and obj.state in ACTIONS[name].applies_to
        ]

    # -- actions ---------------------------------------------------------------------------

    def run_action(
        self, request: HttpRequest, queryset: QuerySet[Job], name: str
    ) -> HttpResponse | None:
        """Confirm, then make one lifecycle call per selected job and report the outcome."""
        action = ACTIONS[name]
        if bulk.selects_across(request):
            return self.run_across(request, queryset, name)
        rows = list(queryset.values_list("pk", "type", "queue", "state"))
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request,
                self,
                action=name,
                title=action.title,
                question=action.question,
                headers=("job", "type", "queue", "state"),
                rows=confirm_rows(action, rows),
                submit_label=f"Yes, {action.button.lower()} {len(rows)} "
                + ("job" if len(rows) == 1 else "jobs"),
                danger=action.danger,
            )
        outcome = bulk.apply(
            ((str(pk), pk) for pk, *_ in rows),
            lambda pk: action.run(request, pk),
            gone=bulk.gone(request, (str(pk) for pk, *_ in rows)),
        )
        self.message_user(request, outcome.message(action.past), outcome.level)
        return None

    def run_across(self, request: HttpRequest, queryset: QuerySet[Job], name: str) -> HttpResponse:
        """ "Select all N" chosen: confirm with N and a sample, then act in batches.

        After the confirmation the progress page drives the run: each of its requests acts
        on the next ``ACROSS_BATCH`` matching jobs in primary-key order (one lifecycle call
        each, committed as it goes) and reports how far it got. Stopping between two
        requests leaves nothing half-done; continuing resumes after the last job acted on.
        Jobs that come to match the filter during the run are acted on too.
        """
        action = ACTIONS[name]
        # Django posts an action only with some object selected: carry one along.
        keys = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)[:1]
        if not bulk.is_confirmed(request):
            sample = list(queryset.values_list("pk", "type", "queue", "state")[
                : bulk.CONFIRM_LIST_LIMIT])  # fmt: skip
            total, estimated = jobquery.count(queryset)
            about = "about " if estimated else ""
            noun = "job" if total == 1 else "jobs"
            return bulk.confirmation(
                request,
                self,
                action=name,
                title=action.title,
                question=f"{action.question} This applies to all {about}{total:,} {noun} "
                "matching the current filter, in batches, with the progress shown.",
                headers=("job", "type", "queue", "state"),
                rows=confirm_rows(action, sample),
                total=total,
                submit_label=f"Yes, {action.button.lower()} all {about}{total:,} matching {noun}",
                danger=action.danger,
                across=True,
                estimated=estimated,
            )
        try:
            run = bulk.AcrossRun.load(request)
            after = uuid.UUID(run.after) if run and run.after else None
        except ValueError:
            return HttpResponseBadRequest("The progress page's state was not understood.")
        if run is None:  # just confirmed: show the progress page, which runs the batches
            posted = request.POST.get("ojs_total", "")
            run = bulk.AcrossRun(total=int(posted) if posted.isdigit() else 0,
                                 estimated=request.POST.get("ojs_estimated") == "1")  # fmt: skip
            return bulk.progress_page(request, self, action=name, title=action.title,
                                      past=action.past, run=run, keys=keys)  # fmt: skip
        if not run.finished:
            pending = queryset.order_by("pk")
            if after is not None:
                pending = pending.filter(pk__gt=after)
            batch = list(pending.values_list("pk", flat=True)[:ACROSS_BATCH])
            run.add(bulk.apply(((str(pk), pk) for pk in batch), lambda pk: action.run(request, pk)))
            run.after = str(batch[-1]) if batch else run.after
            run.total = max(run.total, run.processed)
            run.finished = len(batch) < ACROSS_BATCH
            if run.finished:
                self.message_user(request, run.message(action.past), run.level)
        if bulk.wants_json(request):
            return bulk.across_json(run, action.past)
        return bulk.progress_page(request, self, action=name, title=action.title,
                                  past=action.past, run=run, keys=keys)  # fmt: skip

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.run_action(request, queryset, "cancel_jobs")

    @admin.action(description="Retry selected dead-lettered jobs", permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.run_action(request, queryset, "retry_jobs")

    @admin.action(description="Discard selected jobs", permissions=["discard"])
    def discard_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.run_action(request, queryset, "discard_jobs")

    @admin.action(description="Run selected jobs now", permissions=["run_now"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.run_action(request, queryset, "run_jobs_now")

    @admin.action(description="Purge selected finished jobs", permissions=["purge"])
    def purge_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self.run_action(request, queryset, "purge_jobs")
