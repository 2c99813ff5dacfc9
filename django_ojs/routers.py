"""A database router that keeps django-ojs's tables in the ``OJS_DATABASE`` alias.

Add it when the jobs live in a database of their own::

    DATABASE_ROUTERS = ["django_ojs.routers.OJSRouter"]
    OJS_DATABASE = "jobs"

Every model of django-ojs (app label ``ojs``: jobs, events, workers, queues, cron,
workflows, API keys, webhooks, the audit log) is read from and written to ``OJS_DATABASE``; its
migrations run there and nowhere else, and no other app's migrations run there (unless
``OJS_DATABASE`` is ``default``), so ``manage.py migrate --database jobs`` creates the job
tables only and ``manage.py migrate`` creates none of them. Django's ``auth``,
``contenttypes``, ``sessions`` and ``admin`` stay where they are: the admin's users,
permissions and log entries live in ``default`` as usual.

Other models get no opinion (``None``), so it composes with your own routers: list it
before a catch-all router that would send everything elsewhere.
See docs/how-to/run-at-scale.md ("A database of its own").
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model

from django_ojs.conf import settings

#: django-ojs's app label (``DjangoOjsConfig.label``): its tables are ``ojs_*``.
APP_LABEL = "ojs"


def _ours(model: type[Model] | Model) -> bool:
    return bool(model._meta.app_label == APP_LABEL)


class OJSRouter:
    """Route the ``django_ojs`` app to ``OJS_DATABASE``; keep other apps out of it."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return settings.DATABASE if _ours(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return settings.DATABASE if _ours(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # Two django-ojs rows (a job and its workflow) share the jobs database. Anything
        # else is left to Django: a relation within one database only.
        return True if _ours(obj1) and _ours(obj2) else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        jobs = settings.DATABASE
        if app_label == APP_LABEL:
            return db == jobs
        if db == jobs and jobs != DEFAULT_DB_ALIAS:
            return False
        return None
