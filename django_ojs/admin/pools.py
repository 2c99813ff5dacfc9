"""The worker pools admin (OJS fair scheduling §6): a pool's queues, strategy and weights,
its members and the jobs they hold.

Adding or editing a pool saves it through ``lifecycle.save_pool`` (the validation of the
HTTP API's ``PUT /admin/pools/{name}``); deleting is ``lifecycle.delete_pool``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from django_ojs import lifecycle, scheduling
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.exceptions import OJSError
from django_ojs.models import Worker, WorkerPool


class WorkerPoolForm(forms.ModelForm):  # type: ignore[type-arg]  # not subscriptable at run time
    queues = forms.CharField(
        help_text="Queue names separated by commas, most important first (strict order).",
    )
    weights = forms.JSONField(
        initial=dict,
        required=False,
        help_text='For the weighted strategy: {"queue": weight}, positive integers '
        "(a queue left out weighs 1).",
    )

    class Meta:
        model = WorkerPool
        fields = ("name", "queues", "strategy", "weights", "concurrency", "isolated",
                  "starvation_enabled", "rotation_interval", "min_dispatch_ratio")  # fmt: skip
        labels = {"starvation_enabled": "Starvation prevention", "isolated": "Isolated"}
        help_texts = {
            "isolated": "Only this pool's workers take jobs from its queues (fair scheduling "
            "§6.3): a worker outside the pool gets none of them."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.queues:
            self.initial["queues"] = ", ".join(self.instance.queues)

    def clean_queues(self) -> list[str]:
        raw = self.cleaned_data.get("queues") or ""
        return [part.strip() for part in raw.split(",") if part.strip()]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            scheduling.policy(
                data.get("queues") or [],
                strategy=data.get("strategy"),
                weights=data.get("weights") or None,
                starvation={
                    "enabled": bool(data.get("starvation_enabled")),
                    "rotation_interval": data.get("rotation_interval") or 30.0,
                    "min_dispatch_ratio": data.get("min_dispatch_ratio") or 0.0,
                },
            )
        except OJSError as exc:
            field = str(exc.details.get("field", "")).split(".")[0] if exc.details else ""
            if field == "starvation_prevention":
                field = "rotation_interval" if "interval" in exc.message else "min_dispatch_ratio"
            self.add_error(field if field in self.fields else None, exc.message)
        return data


@admin.register(WorkerPool)
class WorkerPoolAdmin(ReadOnlyAdmin[WorkerPool]):
    form = WorkerPoolForm
    list_display = ("name", "queue_list", "strategy", "weight_list", "concurrency",
                    "isolated", "starvation_enabled", "members")  # fmt: skip
    list_filter = ("strategy", "isolated", "starvation_enabled")
    search_fields = ("name",)
    readonly_fields = ("created_at", "updated_at", "members")

    def get_fieldsets(self, request: HttpRequest, obj: WorkerPool | None = None) -> Any:
        sets: list[Any] = [
            (
                None,
                {"fields": ("name", "queues", "strategy", "weights", "concurrency", "isolated")},
            ),
            (
                "Starvation prevention",
                {"fields": ("starvation_enabled", "rotation_interval", "min_dispatch_ratio")},
            ),
        ]
        if obj is not None:
            sets.append(("Members", {"fields": self.readonly_fields}))
        return sets

    def get_readonly_fields(self, request: HttpRequest, obj: WorkerPool | None = None) -> Any:
        return ("name", *self.readonly_fields) if obj is not None else ()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.add_workerpool")

    def has_change_permission(self, request: HttpRequest, obj: WorkerPool | None = None) -> bool:
        return request.user.has_perm("ojs.change_workerpool")

    def has_delete_permission(self, request: HttpRequest, obj: WorkerPool | None = None) -> bool:
        return request.user.has_perm("ojs.delete_workerpool")

    def save_model(self, request: HttpRequest, obj: WorkerPool, form: Any, change: bool) -> None:
        data = form.cleaned_data
        saved, _ = lifecycle.save_pool(
            obj.name, data["queues"], strategy=data.get("strategy"),
            weights=data.get("weights") or None, concurrency=data.get("concurrency"),
            isolated=bool(data.get("isolated")),
            starvation={
                "enabled": bool(data.get("starvation_enabled")),
                "rotation_interval": data.get("rotation_interval") or 30.0,
                "min_dispatch_ratio": data.get("min_dispatch_ratio") or 0.0,
            },
            actor=admin_actor(request),
        )  # fmt: skip
        form.instance = saved

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # no relations; save_model saved everything

    def delete_model(self, request: HttpRequest, obj: WorkerPool) -> None:
        lifecycle.delete_pool(obj.name, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WorkerPool]) -> None:
        for name in queryset.values_list("name", flat=True):
            lifecycle.delete_pool(name, actor=admin_actor(request))

    @admin.display(description="queues")
    def queue_list(self, obj: WorkerPool) -> str:
        return ", ".join(obj.queues)

    @admin.display(description="weights")
    def weight_list(self, obj: WorkerPool) -> str:
        if obj.strategy != scheduling.WEIGHTED:
            return "—"
        return " : ".join(str((obj.weights or {}).get(q, 1)) for q in obj.queues)

    @admin.display(description="workers")
    def members(self, obj: WorkerPool) -> Any:
        count = Worker.objects.filter(pool=obj.name).count()
        url = reverse("admin:ojs_worker_changelist") + f"?pool={obj.name}"
        return format_html('<a href="{}">{}</a>', url, count)
