"""Settings of the server ``make bench-http`` starts: the example project's, plus the plain
Django reference views of ``bench/http_reference.py`` on the same URLconf."""

from __future__ import annotations

from example_project.settings import *  # noqa: F403 - the example project, unchanged

ROOT_URLCONF = "bench.http_reference"
