"""Webhook subscriptions in the Django admin: list, add, change, delete, rotate, test.

Subscriptions are written by ``django_ojs.lifecycle`` (``create_webhook``,
``update_webhook``, ``delete_webhook``, ``rotate_webhook_secret``); this admin never saves
or deletes a row itself. The form checks its fields with the same rules first. A secret is
shown once, when it is made (add, rotate). Deliveries are jobs of type
``ojs.webhook.deliver`` (the job and dead letter pages show them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from django_ojs import lifecycle
from django_ojs.admin.base import ReadOnlyAdmin, admin_actor
from django_ojs.deliveries import ping
from django_ojs.exceptions import OJSError, ValidationError
from django_ojs.models import WebhookSubscription
from django_ojs.webhooks import filters

if TYPE_CHECKING:
    _SubscriptionForm = ModelForm[WebhookSubscription]
else:
    _SubscriptionForm = ModelForm


def _names(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


class WebhookSubscriptionForm(_SubscriptionForm):
    """The URL, and the event types and filters as comma-separated text."""

    events_text = forms.CharField(
        label="events",
        help_text="Comma-separated event types: job.completed, job.*, or *.",
    )
    queues_text = forms.CharField(
        label="queues", required=False, help_text="Only events of these queues (empty: all)."
    )
    job_types_text = forms.CharField(
        label="job types",
        required=False,
        help_text="Only events of these job types, or prefix.* (empty: all).",
    )

    class Meta:
        model = WebhookSubscription
        fields = ("url", "active", "metadata")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        instance = self.instance
        if not instance._state.adding:
            flt = instance.filter or {}
            self.fields["events_text"].initial = ", ".join(instance.events or ())
            self.fields["queues_text"].initial = ", ".join(flt.get("queues", ()))
            self.fields["job_types_text"].initial = ", ".join(flt.get("job_types", ()))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            data["events"] = filters.validate_events(_names(data.get("events_text") or ""))
            data["filter"] = filters.validate_filter(
                {
                    "queues": _names(data.get("queues_text") or ""),
                    "job_types": _names(data.get("job_types_text") or ""),
                }
            )
            if "url" in data:
                data["url"] = lifecycle.check_webhook_url(data["url"])
        except ValidationError as exc:
            raise forms.ValidationError(exc.message) from None
        return data


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(ReadOnlyAdmin[WebhookSubscription]):
    form = WebhookSubscriptionForm
    list_display = (
        "url", "event_list", "active", "last_delivery_at", "last_delivery_status",
        "failure_count", "created_at",
    )  # fmt: skip
    list_filter = ("active",)
    search_fields = ("url",)
    actions = ("rotate_secrets", "send_test_events")
    readonly_fields = (
        "public_id", "created_at", "updated_at", "last_delivery_at", "last_delivery_status",
        "failure_count",
    )  # fmt: skip

    def get_fields(
        self, request: HttpRequest, obj: WebhookSubscription | None = None
    ) -> tuple[str, ...]:
        edit = ("url", "events_text", "queues_text", "job_types_text", "active", "metadata")
        return edit if obj is None else ("public_id", *edit, *self.readonly_fields[1:])

    def has_add_permission(self, request: HttpRequest) -> bool:
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_change_permission(
        self, request: HttpRequest, obj: WebhookSubscription | None = None
    ) -> bool:
        return admin.ModelAdmin.has_change_permission(self, request, obj)

    def has_delete_permission(
        self, request: HttpRequest, obj: WebhookSubscription | None = None
    ) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    @admin.display(description="events")
    def event_list(self, obj: WebhookSubscription) -> str:
        return ", ".join(obj.events or ())

    def save_model(
        self,
        request: HttpRequest,
        obj: WebhookSubscription,
        form: ModelForm[WebhookSubscription],
        change: bool,
    ) -> None:
        data = form.cleaned_data
        fields = {
            "url": data["url"],
            "events": data["events"],
            "filter": data["filter"],
            "active": bool(data.get("active")),
            "metadata": data.get("metadata") or {},
        }
        if change:
            lifecycle.update_webhook(obj.pk, fields, actor=admin_actor(request))
            return
        made = lifecycle.create_webhook(
            fields.pop("url"), fields.pop("events"), actor=admin_actor(request), **fields
        )
        obj.pk, obj.created_at, obj.secret = made.pk, made.created_at, made.secret
        obj._state.adding = False
        obj._state.db = made._state.db
        self.message_user(
            request,
            f"Signing secret (shown once; rotate it if lost): {made.secret}",
            messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: WebhookSubscription) -> None:
        lifecycle.delete_webhook(obj.pk, actor=admin_actor(request))

    def delete_queryset(
        self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]
    ) -> None:
        for pk in list(queryset.values_list("pk", flat=True)):
            lifecycle.delete_webhook(pk, actor=admin_actor(request))

    @admin.action(description="Rotate the signing secret of selected subscriptions")
    def rotate_secrets(self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]) -> None:
        for pk in list(queryset.values_list("pk", flat=True)):
            made = lifecycle.rotate_webhook_secret(pk, actor=admin_actor(request))
            self.message_user(
                request,
                f"{made.url}: new signing secret (shown once): {made.secret}",
                messages.WARNING,
            )

    @admin.action(description="Send a webhook.test event to selected subscriptions")
    def send_test_events(
        self, request: HttpRequest, queryset: QuerySet[WebhookSubscription]
    ) -> None:
        for subscription in queryset:
            try:
                answer = ping(subscription)
            except OJSError as exc:
                self.message_user(request, f"{subscription.url}: {exc.message}", messages.ERROR)
                continue
            if answer["success"]:
                self.message_user(
                    request,
                    f"{subscription.url}: HTTP {answer['status_code']} in "
                    f"{answer['response_time_ms']} ms",
                )
            else:
                self.message_user(
                    request,
                    f"{subscription.url}: failed ({answer['error']['message']})",
                    messages.ERROR,
                )
