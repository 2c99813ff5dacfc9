"""API keys of the HTTP API: list, create (the key is shown once), change, revoke.

Keys are created, changed and revoked by ``django_ojs.apikeys`` (the only writer of
``ApiKey`` rows); this admin never saves or deletes a row itself. Changing a key's scope or
queue allowlist (OJS security §7.1: access policies change without code changes) and
revoking need ``ojs.change_apikey``; the name and the secret never change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from django_ojs import apikeys, validation
from django_ojs.admin import bulk
from django_ojs.admin.base import ReadOnlyAdmin
from django_ojs.exceptions import ValidationError
from django_ojs.models import ApiKey
from django_ojs.tenancy import validate_tenants

if TYPE_CHECKING:
    _ApiKeyModelForm = ModelForm[ApiKey]
else:
    _ApiKeyModelForm = ModelForm


class ActiveFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[ApiKey]
    ) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> QuerySet[ApiKey]:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


def _revoke(pk: int) -> str | None:
    key = ApiKey.objects.filter(pk=pk).first()
    if key is None:
        return "no longer exists"
    if not key.is_active:
        return "already revoked"
    apikeys.revoke(key)
    return None


class ApiKeyForm(_ApiKeyModelForm):
    """Name and scope, and the queue allowlist as comma-separated text."""

    queues_text = forms.CharField(
        label="queues",
        required=False,
        help_text="Comma-separated queues the key may use (names, or 'prefix*'). "
        "Empty: every queue.",
    )

    tenants_text = forms.CharField(
        label="tenants",
        required=False,
        help_text="Comma-separated tenants whose jobs the key may enqueue, fetch, read and "
        "cancel. Empty: every job.",
    )

    class Meta:
        model = ApiKey
        fields = ("name", "scope")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["queues_text"].initial = ", ".join(self.instance.queues or ())
            self.fields["tenants_text"].initial = ", ".join(self.instance.tenants or ())

    def clean_tenants_text(self) -> list[str]:
        raw = self.cleaned_data.get("tenants_text") or ""
        try:
            return validate_tenants([t.strip() for t in raw.split(",") if t.strip()])
        except ValidationError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean_queues_text(self) -> list[str]:
        raw = self.cleaned_data.get("queues_text") or ""
        try:
            return validation.validate_queue_patterns(
                [q.strip() for q in raw.split(",") if q.strip()]
            )
        except ValidationError as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin[ApiKey]):
    form = ApiKeyForm
    list_display = (
        "name", "key_id", "scope", "queue_list", "tenant_list", "status", "created_at",
        "last_used_at", "revoked_at",
    )  # fmt: skip
    list_filter = ("scope", ActiveFilter)
    search_fields = ("name", "prefix")
    actions = ("revoke_keys",)
    readonly_fields = ("key_id", "status", "created_at", "last_used_at", "revoked_at")

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name", "scope", "queues_text", "tenants_text")
        return (
            "name", "key_id", "scope", "queues_text", "tenants_text", "status", "created_at",
            "last_used_at", "revoked_at",
        )  # fmt: skip

    def get_readonly_fields(
        self, request: HttpRequest, obj: ApiKey | None = None
    ) -> tuple[str, ...]:
        if obj is None:
            return self.readonly_fields
        return ("name", *self.readonly_fields)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Keys are created here (shown once); their scope and queues may change; never
        # deleted, only revoked.
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_change_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return request.user.has_perm("ojs.change_apikey")

    @admin.display(description="queues")
    def queue_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.queues) if obj.queues else "all"

    @admin.display(description="tenants")
    def tenant_list(self, obj: ApiKey) -> str:
        return ", ".join(obj.tenants) if obj.tenants else "all"

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ojs.change_apikey")

    @admin.display(description="key id")
    def key_id(self, obj: ApiKey) -> str:
        return f"{apikeys.KEY_PREFIX}{obj.prefix}_…" if obj.prefix else "—"

    @admin.display(description="status", boolean=False)
    def status(self, obj: ApiKey) -> str:
        return "active" if obj.is_active else "revoked"

    def save_model(
        self, request: HttpRequest, obj: ApiKey, form: ModelForm[ApiKey], change: bool
    ) -> None:
        queues = form.cleaned_data.get("queues_text") or []
        tenants = form.cleaned_data.get("tenants_text") or []
        if change:
            apikeys.update(obj.prefix, scope=obj.scope, queues=queues, tenants=tenants)
            return
        # The add form only collects name, scope, queues and tenants; apikeys.create
        # makes the key.
        key, raw = apikeys.create(obj.name, obj.scope, queues=queues, tenants=tenants)
        obj.pk, obj.prefix, obj.created_at = key.pk, key.prefix, key.created_at
        obj._state.adding = False
        obj._state.db = key._state.db
        request._ojs_new_key = raw  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        """Show the new key once, on this response only: it is never stored or shown again."""
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": "API key created",
            "subtitle": None,
            "opts": opts,
            "app_label": opts.app_label,
            "key": obj,
            "raw_key": getattr(request, "_ojs_new_key", ""),
        }
        request.current_app = self.admin_site.name
        response = TemplateResponse(request, "admin/ojs/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected API keys", permissions=["revoke"])
    def revoke_keys(
        self, request: HttpRequest, queryset: QuerySet[ApiKey]
    ) -> TemplateResponse | None:
        keys = list(queryset.values_list("pk", "name", "prefix", "scope", "revoked_at"))
        if not bulk.is_confirmed(request):
            return bulk.confirmation(
                request,
                self,
                action="revoke_keys",
                title="Revoke API keys",
                question="Revoke these API keys? Clients using them are refused at once.",
                headers=("name", "key id", "scope"),
                rows=[
                    bulk.ConfirmRow(
                        str(pk),
                        (name, f"{apikeys.KEY_PREFIX}{prefix}_…", scope),
                        "will be skipped: already revoked" if revoked else "",
                    )
                    for pk, name, prefix, scope, revoked in keys
                ],
                submit_label=f"Yes, revoke {len(keys)} " + ("key" if len(keys) == 1 else "keys"),
                danger=True,
            )
        outcome = bulk.apply(
            ((name, pk) for pk, name, *_ in keys),
            _revoke,
            gone=bulk.gone(request, (str(pk) for pk, *_ in keys)),
        )
        self.message_user(request, outcome.message("revoked"), outcome.level)
        return None
