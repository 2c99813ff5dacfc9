"""Routers that get the jobs database wrong, for the system check tests."""

from __future__ import annotations

from typing import Any


class ReadsOnly:
    """Sends the ojs app to ``jobs`` but never migrates it anywhere (``ojs.E017``)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "jobs" if model._meta.app_label == "ojs" else None

    db_for_write = db_for_read

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if app_label == "ojs" else None


class Everywhere(ReadsOnly):
    """Sends the ojs app to ``jobs`` and lets it migrate everywhere (``ojs.W008``)."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return None


class ReadsElsewhere(ReadsOnly):
    """Writes the ojs app to ``jobs`` but reads it from ``default`` (``ojs.W009``)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "default" if model._meta.app_label == "ojs" else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "jobs" if model._meta.app_label == "ojs" else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return db == "jobs" if app_label == "ojs" else None
