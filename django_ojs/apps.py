"""App configuration: registers the system checks and discovers job handlers. No logic."""

from __future__ import annotations

import logging

from django.apps import AppConfig
from django.conf import settings as django_settings


class OJSConfig(AppConfig):
    name = "django_ojs"
    label = "ojs"
    verbose_name = "Open Job Spec"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db import connections
        from django.db.backends.signals import connection_created

        from django_ojs import checks  # noqa: F401 - registers the checks
        from django_ojs.drivers.sqlite import register_functions
        from django_ojs.registry import autodiscover

        # SQLite has no JSON containment: the job search registers its own function.
        connection_created.connect(register_functions, dispatch_uid="ojs_sqlite_functions")
        for conn in connections.all(initialized_only=True):
            if conn.connection is not None:
                register_functions(None, conn)
        autodiscover()  # imports <app>.jobs (OJS_HANDLER_MODULES) so @handler runs
        from django_ojs.deliveries import deliver
        from django_ojs.registry import registry
        from django_ojs.webhooks import DELIVER_TYPE

        registry.register(DELIVER_TYPE, deliver, replace=True)  # webhook deliveries are jobs
        backends = getattr(django_settings, "TASKS", None) or {}
        if any(
            isinstance(b, dict) and b.get("BACKEND") == "django_ojs.tasks.OJSBackend"
            for b in backends.values()
        ):
            try:
                from django_ojs import tasks
            except ImportError as exc:  # Django 5.2 without the backport: say so, start anyway
                logging.getLogger("django_ojs").warning(
                    "TASKS uses django_ojs.tasks.OJSBackend but Django's task framework is "
                    "missing (%s): pip install 'django-ojs[tasks]' on Django 5.2.",
                    exc,
                )
            else:
                tasks.install()  # ojs_worker also runs the @task functions of installed apps
