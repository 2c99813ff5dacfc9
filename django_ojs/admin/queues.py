"""The queues admin: every queue with its jobs counted by state, and pause / resume.

Queues exist implicitly (a job's ``queue`` names one), so the list comes from
``django_ojs.queues.list_queues`` rather than from ``Queue`` rows alone. Pausing and
resuming call ``django_ojs.queues.pause`` / ``resume``; nothing is written here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from django_ojs import lifecycle, retry
from django_ojs import queues as queue_ops
from django_ojs.admin import bulk
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.models import Queue
from django_ojs.queues import QueueInfo
from django_ojs.states import JobState

#: action name → (title, question, past tense, button)
QUEUE_ACTIONS: dict[str, tuple[str, str, str, str]] = {
    "pause_queues": (
        "Pause queues",
        "Pause these queues? Workers stop fetching from them; jobs are still accepted.",
        "paused",
        "pause",
    ),
    "resume_queues": (
        "Resume queues",
        "Resume these queues so workers fetch from them again?",
        "resumed",
        "resume",
    ),
    "set_limits": (
        "Set a concurrency limit",
        "At most this many jobs of each of these queues run at once, across all workers "
        "(empty: no limit).",
        "updated",
        "set the limit of",
    ),
}


def own_retention(info: QueueInfo) -> str:
    """The queue's own retention (queue config §6.3) as ``completed P1D, discarded
    P90D``; empty when every kind follows ``OJS_RETENTION``."""
    own = info.retention or {}
    return ", ".join(
        f"{kind} {retry.format_duration_days(seconds * 1000)}" for kind, seconds in own.items()
    )


def jobs_url(**params: str) -> str:
    base = reverse("admin:ojs_job_changelist")
    return f"{base}?{urlencode(params)}" if params else base


@admin.register(Queue)
class QueueAdmin(ReadOnlyAdmin[Queue]):
    """Queues with their counts by state; pausing needs ``ojs.pause_queue``."""

    fields = ("name", "paused", "paused_at", "created_at")
    readonly_fields = fields

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.pause_queue")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        infos = queue_ops.list_queues(with_counts=True)
        if request.method == "POST":
            return self.run_action(request, {info.name: info for info in infos})
        state_names = [s.value for s in JobState]
        rows = [
            {
                "name": info.name,
                "paused": info.paused,
                "paused_at": info.paused_at,
                "concurrency": (info.limits or {}).get("concurrency"),
                "retention": own_retention(info),
                "url": jobs_url(queue=info.name),
                "counts": [
                    (info.counts.get(s, 0), jobs_url(queue=info.name, state__exact=s))
                    for s in state_names
                ],
                "total": sum(info.counts.values()),
            }
            for info in infos
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Queues",
            "subtitle": None,
            "opts": self.model._meta,
            "app_label": self.model._meta.app_label,
            "states": state_names,
            "rows": rows,
            "actions": [(name, spec[0]) for name, spec in QUEUE_ACTIONS.items()]
            if self.has_pause_permission(request)
            else [],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ojs/queue/change_list.html", context)

    def run_action(self, request: HttpRequest, infos: dict[str, QueueInfo]) -> HttpResponse:
        name = request.POST.get("action", "")
        if name not in QUEUE_ACTIONS:
            self.message_user(request, "No action selected.", messages.WARNING)
            return HttpResponseRedirect(request.get_full_path())
        if not self.has_pause_permission(request):
            raise PermissionDenied
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if not selected:
            self.message_user(
                request,
                "Items must be selected in order to perform actions on them. "
                "No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(request.get_full_path())
        title, question, past, button = QUEUE_ACTIONS[name]
        if name == "set_limits":
            return self.set_limits(request, selected, title, question, past)
        pausing = name == "pause_queues"
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request,
                self,
                action=name,
                title=title,
                question=question,
                headers=("queue", "paused", "waiting jobs"),
                rows=[
                    bulk.ConfirmRow(
                        queue,
                        (
                            queue,
                            "yes" if queue in infos and infos[queue].paused else "no",
                            sum(
                                infos[queue].counts.get(s, 0)
                                for s in ("available", "scheduled", "retryable", "pending")
                            )
                            if queue in infos
                            else 0,
                        ),
                    )
                    for queue in selected
                ],
                submit_label=f"Yes, {button} {len(selected)} "
                + ("queue" if len(selected) == 1 else "queues"),
                danger=pausing,
            )
        who = admin_actor(request)

        def operate(queue: str) -> str | None:
            was_paused = queue in infos and infos[queue].paused
            if pausing:
                lifecycle.pause_queue(queue, actor=who)
                return "already paused" if was_paused else None
            lifecycle.resume_queue(queue, actor=who)
            return None if was_paused else "not paused"

        outcome = bulk.apply(((q, q) for q in selected), operate)
        self.message_user(request, outcome.message(past), outcome.level)
        return HttpResponseRedirect(request.get_full_path())

    def set_limits(
        self, request: HttpRequest, selected: list[str], title: str, question: str, past: str
    ) -> HttpResponse:
        """The form of the "set a concurrency limit" action, then the lifecycle calls."""
        raw = request.POST.get("concurrency", "").strip()
        error = ""
        if bulk.is_confirmed(request):
            limits: dict[str, Any] | None = None
            if raw:
                if not raw.isdigit():
                    error = "Enter a whole number of jobs (0 or more), or nothing for no limit."
                else:
                    limits = {"concurrency": int(raw)}
            if not error:
                who = admin_actor(request)

                def operate(queue: str) -> str | None:
                    lifecycle.set_queue_limits(queue, limits, actor=who)
                    return None

                outcome = bulk.apply(((q, q) for q in selected), operate)
                self.message_user(request, outcome.message(past), outcome.level)
                return HttpResponseRedirect(request.get_full_path())
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.model._meta,
            "question": question,
            "queues": selected,
            "value": raw,
            "error": error,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/ojs/queue/set_limits.html", context)
