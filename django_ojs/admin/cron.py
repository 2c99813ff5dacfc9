"""The cron admin: periodic jobs with their next and last runs, recent jobs, and actions.

Adding or editing an entry registers it through ``lifecycle.register_cron`` (the same
validation as the HTTP API); pause, resume, "run now" and delete are lifecycle calls too.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_ojs import lifecycle, schedule
from django_ojs.admin import bulk, display
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.exceptions import OJSError
from django_ojs.models import CronJob, Job

#: action name → (title, question, past tense, button)
CRON_ACTIONS: dict[str, tuple[str, str, str, str]] = {
    "pause_cron": ("Pause cron jobs", "Pause these cron jobs? They stop firing until resumed.",
                   "paused", "pause"),
    "resume_cron": ("Resume cron jobs", "Resume these cron jobs? They fire from their next "
                    "slot on (missed slots are not caught up).", "resumed", "resume"),
    "run_cron_now": ("Run cron jobs now", "Enqueue one job of each of these cron jobs now? "
                     "Their schedules do not move.", "enqueued", "run"),
}  # fmt: skip


class CronForm(forms.ModelForm):  # type: ignore[type-arg]  # not subscriptable at run time
    args = forms.JSONField(initial=list, required=False, help_text="A JSON array.")
    options = forms.JSONField(
        initial=dict,
        required=False,
        help_text='Job options as in an enqueue request, e.g. {"queue": "reports", "retry": '
        '{"max_attempts": 5}}.',
    )

    class Meta:
        model = CronJob
        fields = ("name", "expression", "timezone", "type", "args", "options", "overlap_policy",
                  "enabled", "description")  # fmt: skip

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            schedule.parse(data.get("expression"), data.get("timezone") or "UTC")
        except OJSError as exc:
            self.add_error(
                "expression" if "timezone" not in exc.message else "timezone", exc.message
            )
        return data


@admin.register(CronJob)
class CronJobAdmin(ReadOnlyAdmin[CronJob]):
    form = CronForm
    list_display = ("name", "expression", "timezone", "type", "queue", "status", "next_run",
                    "last_run", "run_count", "skip_count", "origin")  # fmt: skip
    list_filter = ("enabled", "origin", "overlap_policy")
    search_fields = ("name", "type", "description")
    actions = tuple(CRON_ACTIONS)
    readonly_fields = ("next_run_at", "last_run_at", "run_count", "skip_count", "origin",
                       "created_at", "updated_at", "recent_jobs")  # fmt: skip

    def get_fieldsets(self, request: HttpRequest, obj: CronJob | None = None) -> Any:
        entry = (None, {"fields": ("name", "expression", "timezone", "overlap_policy",
                                   "enabled", "description")})  # fmt: skip
        template = ("Job", {"fields": ("type", "args", "options")})
        if obj is None:
            return [entry, template]
        state = ("Runs", {"fields": self.readonly_fields})
        return [entry, template, state]

    def get_readonly_fields(self, request: HttpRequest, obj: CronJob | None = None) -> Any:
        return ("name", *self.readonly_fields) if obj is not None else ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.add_cronjob")

    def has_change_permission(self, request: HttpRequest, obj: CronJob | None = None) -> bool:
        return request.user.has_perm("ojs.change_cronjob")

    def has_delete_permission(self, request: HttpRequest, obj: CronJob | None = None) -> bool:
        return request.user.has_perm("ojs.delete_cronjob")

    def has_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.run_cron_now")

    def save_model(self, request: HttpRequest, obj: CronJob, form: Any, change: bool) -> None:
        data = form.cleaned_data
        lifecycle.register_cron(
            obj.name, data["expression"], data["type"], data.get("args") or [],
            options=data.get("options") or {}, timezone_name=data.get("timezone") or "UTC",
            overlap_policy=data.get("overlap_policy"), enabled=data.get("enabled"),
            description=data.get("description") or "", actor=admin_actor(request),
        )  # fmt: skip

    def delete_model(self, request: HttpRequest, obj: CronJob) -> None:
        lifecycle.delete_cron(obj.name, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[CronJob]) -> None:
        for name in queryset.values_list("name", flat=True):
            lifecycle.delete_cron(name, actor=admin_actor(request))

    @admin.display(description="queue")
    def queue(self, obj: CronJob) -> str:
        return str((obj.options or {}).get("queue") or "default")

    @admin.display(description="status", ordering="enabled")
    def status(self, obj: CronJob) -> SafeString:
        label = "active" if obj.enabled else "paused"
        return format_html('<span class="ojs-state ojs-state-{}">{}</span>',
                           "available" if obj.enabled else "scheduled", label)  # fmt: skip

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: CronJob) -> SafeString | str:
        return display.compact_time(obj.next_run_at) if obj.next_run_at else "—"

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, obj: CronJob) -> SafeString | str:
        if obj.last_run_at is None:
            return "never"
        if obj.last_job_id is None:
            return display.compact_time(obj.last_run_at)
        url = reverse("admin:ojs_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}">{}</a>', url, display.compact_time(obj.last_run_at))

    @admin.display(description="recent jobs")
    def recent_jobs(self, obj: CronJob) -> SafeString | str:
        jobs = (
            Job.objects.filter(meta__cron_name=obj.name)
            .order_by("-id")
            .values_list("pk", "state", "created_at")[:20]
        )
        if not jobs:
            return "—"
        return format_html_join(
            "",
            '<div><a href="{}">{}</a> <span class="ojs-state ojs-state-{}">{}</span> {}</div>',
            (
                (reverse("admin:ojs_job_change", args=[pk]), pk, state, state, created.isoformat())
                for pk, state, created in jobs
            ),
        )

    def _run(self, request: HttpRequest, queryset: QuerySet[CronJob], name: str) -> Any:
        title, question, past, button = CRON_ACTIONS[name]
        rows = list(queryset.values_list("name", "expression", "enabled", "next_run_at"))
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request, self, action=name, title=title, question=question,
                headers=("name", "expression", "enabled", "next run"),
                rows=[bulk.ConfirmRow(r[0], r) for r in rows],
                submit_label=f"Yes, {button} {len(rows)} " + ("cron job" if len(rows) == 1 else "cron jobs"),
            )  # fmt: skip
        actor = admin_actor(request)

        def operate(entry: str) -> str | None:
            if name == "run_cron_now":
                lifecycle.run_cron_now(entry, actor=actor)
            else:
                lifecycle.set_cron_enabled(entry, name == "resume_cron", actor=actor)
            return None

        outcome = bulk.apply(((r[0], r[0]) for r in rows), operate,
                             gone=bulk.gone(request, (r[0] for r in rows)))  # fmt: skip
        self.message_user(request, outcome.message(past), outcome.level)
        return None

    @admin.action(description="Pause selected cron jobs", permissions=["change"])
    def pause_cron(
        self, request: HttpRequest, queryset: QuerySet[CronJob]
    ) -> TemplateResponse | None:
        return self._run(request, queryset, "pause_cron")  # type: ignore[no-any-return]

    @admin.action(description="Resume selected cron jobs", permissions=["change"])
    def resume_cron(
        self, request: HttpRequest, queryset: QuerySet[CronJob]
    ) -> TemplateResponse | None:
        return self._run(request, queryset, "resume_cron")  # type: ignore[no-any-return]

    @admin.action(description="Run selected cron jobs now", permissions=["run"])
    def run_cron_now(
        self, request: HttpRequest, queryset: QuerySet[CronJob]
    ) -> TemplateResponse | None:
        return self._run(request, queryset, "run_cron_now")  # type: ignore[no-any-return]


__all__ = ["CronJobAdmin"]
