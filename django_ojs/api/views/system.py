"""System endpoints: ``GET /ojs/manifest`` (HB §21) and ``GET /ojs/v1/health`` (HB §8.1).

Both are public: load balancers and clients discovering the server have no credentials.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse
from rest_framework.response import Response

import django_ojs
from django_ojs import lifecycle, metrics
from django_ojs.api.permissions import INSPECT
from django_ojs.api.views.base import OJSView
from django_ojs.api.wire import OJS_VERSION
from django_ojs.conf import settings
from django_ojs.envelope import SPECVERSION
from django_ojs.models import Queue

_STARTED = time.monotonic()
#: The highest OJS conformance level whose official suites pass (conformance §3): levels
#: 0 to 4 run in CI (``make conformance``, PostgreSQL) and must all pass.
CONFORMANCE_LEVEL = 4


#: The official extensions served, each with the version of its spec document.
OFFICIAL_EXTENSIONS = (
    ("admin-api", "1.0.0-rc.1"),
    ("bulk-operations", "1.0.0-rc.1"),
    ("cron", "1.0.0-rc.1"),
    ("dead-letter", "1.0.0-rc.1"),
    ("fair-scheduling", "1.0.0-rc.1"),
    ("middleware", "1.0.0-rc.1"),
    ("multi-tenancy", "1.0.0-rc.1"),
    ("progress", "1.0.0-rc.1"),
    ("rate-limiting", "1.0.0-rc.1"),
    ("results", "1.0.0-rc.1"),
    ("timeouts", "1.0.0-rc.1"),
    ("unique-jobs", "1.0.0-rc.1"),
    ("webhooks", "1.0.0-rc.1"),
    ("workflows", "1.0.0-rc.1"),
)


class ManifestView(OJSView):
    """What this server implements: the union of HB §21 and conformance §4 fields."""

    def get(self, request: Any) -> Response:
        vendor = lifecycle.backend()
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
                    "webhooks": True,
                    # The official admin UI shows its Pools and Tenants pages for these.
                    "fair_scheduling": True,
                    "multi_tenancy": True,
                },
                "extensions": {
                    # Conformance §4.2.1's structured form: {name, uri, version} each.
                    "official": [
                        {"name": name, "uri": f"urn:ojs:ext:{name}", "version": version}
                        for name, version in OFFICIAL_EXTENSIONS
                    ],
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
                    "ready": request.build_absolute_uri(self.location("ready")),
                    "admin": request.build_absolute_uri(self.location("admin-stats"))[
                        : -len("stats")
                    ],
                    "metrics": request.build_absolute_uri(self.location("metrics")),
                },
            }
        )


class HealthView(OJSView):
    """``ok`` (200) when the job store answers, ``degraded`` (503) when it does not."""

    def get(self, request: Any) -> Response:
        started = time.perf_counter()
        backend: dict[str, Any] = {"type": lifecycle.backend()}
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


_migrated: set[str] = set()


class ReadyView(OJSView):
    """``GET /ojs/v1/ready``: 200 when this process can serve jobs, else 503.

    Readiness (observability §6), beside ``/health`` (liveness): the job store answers
    *and* its tables are migrated. For a load balancer or Kubernetes readiness probe.
    """

    def get(self, request: Any) -> Response:
        alias = settings.DATABASE
        checks: dict[str, Any] = {}
        try:
            Queue.objects.using(alias).exists()
            checks["database"] = "ok"
            if alias not in _migrated:
                executor = MigrationExecutor(connections[alias])
                plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
                if plan:
                    checks["migrations"] = f"{len(plan)} not applied"
                else:
                    _migrated.add(alias)
            checks.setdefault("migrations", "ok")
        except DatabaseError as exc:
            checks["database"] = f"unavailable: {str(exc).strip()[:200]}"
        ready = all(value == "ok" for value in checks.values()) and "database" in checks
        return Response(
            {"status": "ready" if ready else "not_ready", "checks": checks},
            status=200 if ready else 503,
        )


class MetricsView(OJSView):
    """``GET /ojs/metrics``: Prometheus text format (needs prometheus-client).

    Authenticated like the API (``inspect`` scope), so give Prometheus an API key
    (``authorization: {credentials: ...}`` in its scrape config), or open the API with
    ``OJS_API_AUTH = "none"`` on a private network.
    """

    operation = INSPECT

    def get(self, request: Any) -> HttpResponse:
        body, content_type = metrics.render()
        return HttpResponse(body, content_type=content_type)
