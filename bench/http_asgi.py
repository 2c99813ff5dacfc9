"""ASGI entry point of the ``make bench-http`` server when it runs under uvicorn."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.http_settings")
application = get_asgi_application()
