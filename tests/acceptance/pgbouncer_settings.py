"""Settings of the worker processes of the PgBouncer test (``test_pgbouncer.py``).

``DATABASE_URL`` points ``default`` at the pooler, configured as the docs say for a pooler
in transaction mode; ``DIRECT_DATABASE_URL``, when set, adds the ``direct`` alias (straight
to PostgreSQL) that ``OJS_LISTEN_DATABASE`` may name.
"""

from __future__ import annotations

import os

import environ

from tests.acceptance.settings import *  # noqa: F403 - the acceptance settings, plus the pooler's
from tests.acceptance.settings import DATABASES

DATABASES["default"]["OPTIONS"] = {
    **DATABASES["default"].get("OPTIONS", {}),
    "prepare_threshold": None,  # PgBouncer before 1.21: no prepared statements
}
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
if os.environ.get("DIRECT_DATABASE_URL"):
    DATABASES["direct"] = environ.Env.db_url_config(os.environ["DIRECT_DATABASE_URL"])
