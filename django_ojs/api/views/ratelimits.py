"""Rate-limit inspection (OJS rate-limiting §10.1, §10.3): ``/ojs/v1/rate-limits[/{key}]``."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import lifecycle
from django_ojs.api import pagination
from django_ojs.api.permissions import INSPECT, MANAGE
from django_ojs.api.views.base import OJSView


class RateLimitListView(OJSView):
    """``GET /ojs/v1/rate-limits``: every key with jobs waiting or running (paginated)."""

    operation = INSPECT

    def get(self, request: Any) -> Response:
        page = pagination.page(request.query_params)
        keys = lifecycle.rate_limit_keys()
        chunk, meta = pagination.offset_page(keys, len(keys), page)
        items = [lifecycle.rate_limit_status(key) for key in chunk]
        return Response({"items": items, "rate_limits": items, "pagination": meta})


class RateLimitDetailView(OJSView):
    """``GET /ojs/v1/rate-limits/{key}``: limits, current use, window reset, waiting jobs;
    ``PUT`` overrides the key's limits (§10.2), ``DELETE`` removes the override."""

    operation = {"GET": INSPECT, "PUT": MANAGE, "DELETE": MANAGE}

    def get(self, request: Any, key: str) -> Response:
        return Response(lifecycle.rate_limit_status(key))

    def put(self, request: Any, key: str) -> Response:
        body = self.body(request)
        lifecycle.override_rate_limit(
            key, body, until=body.get("expires_at"), actor=self.actor(request)
        )
        return Response(lifecycle.rate_limit_status(key))

    def delete(self, request: Any, key: str) -> Response:
        lifecycle.clear_rate_limit_override(key, actor=self.actor(request))
        return Response(lifecycle.rate_limit_status(key))
