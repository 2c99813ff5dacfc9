"""App configuration: registers the system checks and discovers job handlers. No logic."""

from __future__ import annotations

from django.apps import AppConfig


class OJSConfig(AppConfig):
    name = "django_ojs"
    label = "ojs"
    verbose_name = "Open Job Spec"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_ojs import checks  # noqa: F401 - registers the checks
        from django_ojs.registry import autodiscover

        autodiscover()  # imports <app>.jobs (OJS_HANDLER_MODULES) so @handler runs
