"""The test settings with the jobs in a database of their own, as
docs/how-to/run-at-scale.md shows them.

``default`` is ``DATABASE_URL`` (Django's auth, sessions, admin log, the test app's models);
``jobs`` is ``JOBS_DATABASE_URL``, else the same server with ``_jobs`` after the database
name (SQLite: ``-jobs`` after the file name), and holds every django-ojs table.
``make test`` runs ``tests/twodb/`` with these settings on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import environ

from tests.settings import *  # noqa: F403 - the test settings, plus a jobs database
from tests.settings import DATABASES


def _jobs_database() -> dict[str, Any]:
    if os.environ.get("JOBS_DATABASE_URL"):
        return environ.Env.db_url_config(os.environ["JOBS_DATABASE_URL"])
    jobs = {key: value for key, value in DATABASES["default"].items() if key != "TEST"}
    if jobs["ENGINE"].endswith("sqlite3"):
        name = Path(jobs["NAME"])
        jobs["NAME"] = str(name.with_name(f"{name.stem}-jobs{name.suffix}"))
        jobs["TEST"] = {"NAME": str(name.with_name(f"test_{name.stem}-jobs{name.suffix}"))}
    else:
        jobs["NAME"] = f"{jobs['NAME']}_jobs"
    return jobs


DATABASES = {**DATABASES, "jobs": _jobs_database()}
# django-ojs's models (and their migrations) go to OJS_DATABASE, nothing else does.
DATABASE_ROUTERS = ["django_ojs.routers.OJSRouter"]
OJS_DATABASE = "jobs"
