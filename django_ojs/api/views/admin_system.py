"""Admin API §12 (system): maintenance mode and the non-sensitive configuration."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import envelope, lifecycle
from django_ojs.api.views.admin import AdminView
from django_ojs.api.views.base import refuse_unknown
from django_ojs.conf import settings
from django_ojs.exceptions import (
    InvalidRequest,
)
from django_ojs.models import Job


def _maintenance(status: lifecycle.MaintenanceStatus) -> dict[str, Any]:
    """§12.1's fields, and the official OJS admin UI's names for them (``enabled``,
    ``started_at``, ``ends_at``), as where clients disagree elsewhere (digest §8)."""
    ts = envelope.format_timestamp
    return {
        "maintenance": status.enabled,
        "reason": status.reason or None,
        "enabled_at": ts(status.enabled_at),
        "estimated_end": ts(status.estimated_end),
        "enabled": status.enabled,
        "started_at": ts(status.enabled_at),
        "ends_at": ts(status.estimated_end),
    }


class MaintenanceView(AdminView):
    """``GET`` / ``POST /admin/system/maintenance`` ``{enabled, reason?, estimated_duration?}``
    (§12.1): while on, fetches get no jobs; enqueues are still accepted."""

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        return Response(_maintenance(lifecycle.maintenance_status()))

    def post(self, request: Any) -> Response:
        body = self.body(request)
        self.require_every_queue(request)
        refuse_unknown(body, {"enabled", "reason", "estimated_duration", "duration"})
        if not isinstance(body.get("enabled"), bool):
            raise InvalidRequest("enabled must be true or false", details={"field": "enabled"})
        if "estimated_duration" in body and "duration" in body:
            raise InvalidRequest(
                "Send estimated_duration or its alias duration, not both.",
                details={"field": "duration"},
            )
        status = lifecycle.set_maintenance(
            body["enabled"],
            reason=body.get("reason") or "",
            # "duration": the official OJS admin UI's name for it.
            estimated_duration=body.get("estimated_duration", body.get("duration")),
            actor=self.actor(request),
        )
        return Response(_maintenance(status))


class SystemConfigView(AdminView):
    """``GET /admin/system/config`` (§12.2): the non-sensitive settings."""

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        return Response(
            {
                "database_vendor": Job.objects.using(settings.DATABASE).db,
                "retention_seconds": settings.RETENTION,
                "result_ttl_seconds": settings.RESULT_TTL,
                "worker_stale_after_seconds": settings.WORKER_STALE_AFTER,
                "max_envelope_bytes": settings.MAX_ENVELOPE_BYTES,
                "api_auth": settings.API_AUTH,
                "maintenance": lifecycle.maintenance_status().enabled,
            }
        )
