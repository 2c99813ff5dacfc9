"""Settings for worker processes started by the acceptance tests: the example project's.

Any ``OJS_*`` environment variable overrides the setting of that name (its value is
JSON: ``OJS_WORKER_STALE_AFTER=2``), so each test can shorten the timers it exercises.
"""

from __future__ import annotations

import json
import os

from example_project.settings import *  # noqa: F403 - the example project, unchanged
from example_project.settings import INSTALLED_APPS

# The Django tasks the backend tests enqueue (tests/taskapp) must be runnable here too.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.taskapp"]
TASKS = {
    "default": {
        "BACKEND": "django_ojs.tasks.OJSBackend",
        "QUEUES": ["default", "email", "tasks"],
    }
}

for _name, _value in os.environ.items():
    if _name.startswith("OJS_") and _name != "OJS_LOG_LEVEL":
        globals()[_name] = json.loads(_value)
