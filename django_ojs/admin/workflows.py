"""Workflows in the admin: a list with state and progress, a page with the graph, and the
"cancel workflow" / "retry failed steps" actions (each through ``django_ojs.lifecycle``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_ojs import lifecycle
from django_ojs.admin import bulk, display
from django_ojs.admin import graph as graphs
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.models import Job, Workflow


@dataclass(frozen=True)
class WorkflowAction:
    title: str
    question: str
    button: str
    past: str
    applies_to: frozenset[str]
    danger: bool


ACTIONS = {
    "cancel_workflows": WorkflowAction(
        "Cancel workflows",
        "Cancel these workflows? Their waiting and running jobs are cancelled too.",
        "Cancel",
        "cancelled",
        frozenset({"pending", "running"}),
        True,
    ),
    "retry_failed_steps": WorkflowAction(
        "Retry failed steps",
        "Send the failed steps of these workflows back to work? Each workflow resumes "
        "from its failed step.",
        "Retry",
        "retried",
        frozenset({"failed", "running"}),
        False,
    ),
}


@admin.register(Workflow)
class WorkflowAdmin(ReadOnlyAdmin[Workflow]):
    list_display = (
        "id", "kind", "name", "state_badge", "progress", "parent_link", "created_at",
        "finished_at",
    )  # fmt: skip
    list_display_links = ("id",)
    list_filter = ("state", "kind")
    search_fields = ("=id", "name")
    ordering = ("-id",)
    actions = ("cancel_workflows", "retry_failed_steps")
    fields = (
        "id", "kind", "name", "state_badge", "progress", "parent_link", "graph", "callbacks_fired",
        "error_json", "metadata_json", "created_at", "started_at", "finished_at",
    )  # fmt: skip
    readonly_fields = fields

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Workflow) -> SafeString:
        return display.state_badge(obj.state)

    @admin.display(description="progress")
    def progress(self, obj: Workflow) -> SafeString:
        percent = round(100 * obj.finished / obj.total) if obj.total else 0
        return format_html(
            '<span class="ojs-progress" title="{}%"><span style="width:{}%"></span></span> '
            "{} / {} done ({} failed, {} cancelled)",
            percent, percent, obj.finished, obj.total, obj.failed, obj.cancelled,
        )  # fmt: skip

    @admin.display(description="graph")
    def graph(self, obj: Workflow) -> SafeString:
        jobs = list(Job.objects.filter(workflow=obj).order_by("workflow_step", "id"))
        rows: list[tuple[int, Any, Job | Workflow]] = [
            (job.workflow_step, job.id, job)
            for job in jobs
            if job.workflow_step is not None and job.workflow_step >= 0
        ]
        rows += [(c.parent_step or 0, c.id, c) for c in Workflow.objects.filter(parent=obj)]
        newest: dict[int, Job | Workflow] = {}
        for index, _, node in sorted(rows, key=lambda row: (row[0], row[1])):
            newest[index] = node  # a resumed chain's newest row per step
        names = {job_id: name for name, job_id in (obj.callbacks or {}).items()}
        steps = [self._box(i, node) for i, node in sorted(newest.items())]
        callbacks = [
            self._job_box(names.get(str(job.id), "callback"), job)
            for job in jobs
            if job.workflow_step is not None and job.workflow_step < 0
        ]
        layout = graphs.layout(obj.kind, steps, callbacks)
        return SafeString(render_to_string("admin/ojs/workflow/graph.html", {"graph": layout}))

    def _box(self, index: int, node: Job | Workflow) -> graphs.Box:
        if isinstance(node, Job):
            return self._job_box(f"{index}. {node.type}", node)
        # A nested workflow (§10): one box, linked to its own page and graph.
        url = reverse(f"{self.admin_site.name}:ojs_workflow_change", args=[quote(node.pk)])
        label = f"{index}. {node.kind}" + (f" {node.name}" if node.name else "")
        return graphs.Box(label, f"{node.finished}/{node.total} done", node.state, url, nested=True)

    def _job_box(self, label: str, job: Job) -> graphs.Box:
        url = reverse(f"{self.admin_site.name}:ojs_job_change", args=[quote(job.pk)])
        return graphs.Box(label, f"{job.type if ' ' not in label else job.queue}", job.state, url)

    @admin.display(description="inside")
    def parent_link(self, obj: Workflow) -> SafeString | str:
        if obj.parent_id is None:
            return "-"
        url = reverse(f"{self.admin_site.name}:ojs_workflow_change", args=[quote(obj.parent_id)])
        return format_html('<a href="{}">step {} of {}</a>', url, obj.parent_step, obj.parent_id)

    @admin.display(description="callbacks fired")
    def callbacks_fired(self, obj: Workflow) -> str:
        return ", ".join(obj.fired or []) or "-"

    @admin.display(description="error")
    def error_json(self, obj: Workflow) -> SafeString:
        return display.pretty_json(obj.error)

    @admin.display(description="metadata")
    def metadata_json(self, obj: Workflow) -> SafeString:
        return display.pretty_json(obj.metadata)

    # ------------------------------------------------------------------ actions

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.cancel_job")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.retry_job")

    def run_action(
        self, request: HttpRequest, queryset: QuerySet[Workflow], name: str
    ) -> TemplateResponse | None:
        """Confirm, then make one lifecycle call per selected workflow and report."""
        action = ACTIONS[name]
        rows = list(queryset.values_list("pk", "kind", "name", "state"))
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request,
                self,
                action=name,
                title=action.title,
                question=action.question,
                headers=("workflow", "type", "name", "state"),
                rows=[
                    bulk.ConfirmRow(
                        str(pk),
                        (pk, kind, label, display.state_badge(state)),
                        "" if state in action.applies_to else f"will be skipped: it is {state}",
                    )
                    for pk, kind, label, state in rows
                ],
                submit_label=f"Yes, {action.button.lower()} {len(rows)} "
                + ("workflow" if len(rows) == 1 else "workflows"),
                danger=action.danger,
            )
        actor = admin_actor(request)

        def run(pk: Any) -> str | None:
            if name == "cancel_workflows":
                lifecycle.cancel_workflow(pk, actor=actor)
            else:
                lifecycle.retry_failed_steps(pk, actor=actor)
            return None

        outcome = bulk.apply(
            ((str(pk), pk) for pk, *_ in rows),
            run,
            gone=bulk.gone(request, (str(pk) for pk, *_ in rows)),
        )
        self.message_user(request, outcome.message(action.past), outcome.level)
        return None

    @admin.action(description="Cancel selected workflows", permissions=["cancel"])
    def cancel_workflows(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> TemplateResponse | None:
        return self.run_action(request, queryset, "cancel_workflows")

    @admin.action(description="Retry failed steps of selected workflows", permissions=["retry"])
    def retry_failed_steps(
        self, request: HttpRequest, queryset: QuerySet[Workflow]
    ) -> TemplateResponse | None:
        return self.run_action(request, queryset, "retry_failed_steps")
