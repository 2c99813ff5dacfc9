"""The base of every OJS admin page: machine-owned rows are read-only, one stylesheet.

Rows change only through the lifecycle (admin actions call it); the admin never adds,
edits or deletes them by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from django_ojs.actors import Actor

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


class ReadOnlyAdmin(_ModelAdmin[_M]):
    class Media:
        css = {"all": ("ojs/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: _M | None = None) -> bool:
        return False
