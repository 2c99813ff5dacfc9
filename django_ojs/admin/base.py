"""The base of every OJS admin page: machine-owned rows are read-only, one stylesheet.

Rows change only through the lifecycle (admin actions call it); the admin never adds,
edits or deletes them by hand.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdmin(admin.ModelAdmin):
    class Media:
        css = {"all": ("ojs/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
