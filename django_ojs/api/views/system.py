"""System endpoints: ``GET /ojs/manifest`` (HB §21) and ``GET /ojs/v1/health`` (HB §8.1).

Both are public: load balancers and clients discovering the server have no credentials.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import DatabaseError, connections
from rest_framework.response import Response

import django_ojs
from django_ojs.api.views.base import OJSView
from django_ojs.api.wire import OJS_VERSION
from django_ojs.conf import settings
from django_ojs.envelope import SPECVERSION
from django_ojs.models import Queue

_STARTED = time.monotonic()
CONFORMANCE_LEVEL = 1


class ManifestView(OJSView):
    """What this server implements: the union of HB §21 and conformance §4 fields."""

    def get(self, request: Any) -> Response:
        vendor = connections[settings.DATABASE].vendor
        base = request.build_absolute_uri(self.location("health")).rsplit("/health", 1)[0]
        return Response(
            {
                "specversion": SPECVERSION,
                "ojs_version": OJS_VERSION,
                "implementation": {
                    "name": "django-ojs",
                    "version": django_ojs.__version__,
                    "language": "python",
                },
                "conformance_level": CONFORMANCE_LEVEL,
                "conformance_tier": "runtime",
                "protocols": ["http"],
                "backend": f"django-orm:{vendor}",
                # unique-jobs §8.3: a database lock serialises pushes of one key.
                "unique_job_strength": "strong",
                "capabilities": {
                    "batch_enqueue": True,
                    "cron_jobs": True,
                    "dead_letter": True,
                    "delayed_jobs": True,
                    "job_ttl": True,
                    "priority_queues": True,
                    "rate_limiting": True,
                    "schema_validation": False,
                    "unique_jobs": True,
                    "workflows": True,
                    "pause_resume": True,
                    "heartbeats": True,
                    "events": True,
                },
                "extensions": {
                    "official": [],
                    "experimental": [],
                    # HB §5.2: document the authentication requirements here.
                    "authentication": {
                        "schemes": [] if settings.API_AUTH == "none" else ["bearer"],
                        "required": settings.API_AUTH != "none",
                    },
                },
                "endpoints": {
                    "base_url": base,
                    "manifest": request.build_absolute_uri(self.location("manifest")),
                    "health": request.build_absolute_uri(self.location("health")),
                },
            }
        )


class HealthView(OJSView):
    """``ok`` (200) when the job store answers, ``degraded`` (503) when it does not."""

    def get(self, request: Any) -> Response:
        connection = connections[settings.DATABASE]
        started = time.perf_counter()
        backend: dict[str, Any] = {"type": connection.vendor}
        try:
            Queue.objects.using(settings.DATABASE).exists()
        except DatabaseError as exc:
            backend.update(status="disconnected", error=str(exc).strip()[:200])
            status, code = "degraded", 503
        else:
            backend.update(
                # an integer (OpenAPI HealthResponse.backend.latency_ms)
                status="connected",
                latency_ms=round((time.perf_counter() - started) * 1000),
            )
            status, code = "ok", 200
        return Response(
            {
                "status": status,
                "version": OJS_VERSION,
                "implementation_version": django_ojs.__version__,
                "uptime_seconds": round(time.monotonic() - _STARTED),
                "backend": backend,
            },
            status=code,
        )
