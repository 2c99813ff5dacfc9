"""The base of every OJS admin page: machine-owned rows are read-only, one stylesheet.

Rows change only through the lifecycle (admin actions call it); the admin never adds,
edits or deletes them by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse

from django_ojs import lifecycle
from django_ojs.actors import Actor
from django_ojs.conf import settings

_M = TypeVar("_M", bound=Model)

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:

    class _ModelAdmin(admin.ModelAdmin):
        """``ModelAdmin``, subscriptable at run time (it is generic in django-stubs only)."""

        def __class_getitem__(cls, item: object) -> type:
            return cls


def admin_actor(request: HttpRequest) -> Actor:
    """The signed-in user as the audit trail's actor: ``admin:<username>``."""
    user = getattr(request, "user", None)
    return Actor(
        f"admin:{user.get_username() if user is not None else 'unknown'}",
        source="admin",
        source_ip=str(request.META.get("REMOTE_ADDR") or ""),
    )


#: Requests that only show: they may read from the replica (``OJS_READ_DATABASE``).
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def read_alias(request: HttpRequest) -> str | None:
    """The alias a request reads from: the replica (``OJS_READ_DATABASE``) for a page that
    only shows; None (Django's routing, as without a replica) for one that may act, so a
    POST's action or form works on rows read from the primary."""
    if settings.READ_DATABASE and request.method in SAFE_METHODS:
        return lifecycle.read_database()
    return None


def replica_context(request: HttpRequest) -> dict[str, Any]:
    """What a page says about the replica it read from (nothing without one)."""
    if read_alias(request) is None:
        return {}
    return {"ojs_replica": lifecycle.replica_status()}


class ReadOnlyAdmin(_ModelAdmin[_M]):
    #: Whether the lists and views of this model read from the replica on GET.
    reads_from_replica = False

    class Media:
        css = {"all": ("ojs/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[_M]:
        queryset = super().get_queryset(request)
        alias = read_alias(request) if self.reads_from_replica else None
        return queryset.using(alias) if alias else queryset

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self.reads_from_replica:
            extra_context = {**replica_context(request), **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if self.reads_from_replica:
            extra_context = {**replica_context(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False
