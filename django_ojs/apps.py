"""App configuration: registers the system checks. No logic."""

from __future__ import annotations

from django.apps import AppConfig


class OJSConfig(AppConfig):
    name = "django_ojs"
    label = "ojs"
    verbose_name = "Open Job Spec"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_ojs import checks  # noqa: F401 - registers the checks
