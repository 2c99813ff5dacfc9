"""Settings of the processes the acceptance tests start when the jobs live in a database of
their own (``make test`` runs ``tests/twodb/`` with ``tests.twodb_settings``).

``DATABASE_URL`` is ``default`` (auth, sessions, admin log), ``JOBS_DATABASE_URL`` the
``jobs`` alias holding every django-ojs table, routed by ``django_ojs.routers.OJSRouter``.
On PostgreSQL each connection carries ``application_name`` ``ojs-test-<pid>``, so a test
can count a process's connections per database in ``pg_stat_activity``.
"""

from __future__ import annotations

import os

import environ

from tests.acceptance.settings import *  # noqa: F403 - the acceptance settings, plus a jobs database
from tests.acceptance.settings import DATABASES

DATABASES["jobs"] = environ.Env.db_url_config(os.environ["JOBS_DATABASE_URL"])
if DATABASES["jobs"]["ENGINE"].endswith("sqlite3"):
    DATABASES["jobs"]["OPTIONS"] = dict(DATABASES["default"]["OPTIONS"])
else:
    for _alias in ("default", "jobs"):
        DATABASES[_alias]["OPTIONS"] = {
            **DATABASES[_alias].get("OPTIONS", {}),
            "application_name": f"ojs-test-{os.getpid()}",
        }
DATABASE_ROUTERS = ["django_ojs.routers.OJSRouter"]
OJS_DATABASE = "jobs"
