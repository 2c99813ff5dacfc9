"""Settings of the "web" process of the replica test (``test_replica_reads.py``).

``DATABASE_URL`` is the primary (the job database); ``REPLICA_DATABASE_URL`` adds the
``replica`` alias, a streaming standby, that ``OJS_READ_DATABASE`` names.
"""

from __future__ import annotations

import os

import environ

from tests.acceptance.settings import *  # noqa: F403 - the acceptance settings, plus a replica
from tests.acceptance.settings import DATABASES

DATABASES["replica"] = environ.Env.db_url_config(os.environ["REPLICA_DATABASE_URL"])
OJS_READ_DATABASE = "replica"
