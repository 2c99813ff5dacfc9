"""Cron endpoints (OJS cron extension §8, HTTP binding §13): register, list, get, toggle, delete.

Both request shapes are read: the spec's ``{name, cron, type, args, options, …}`` and the
conformance suites' ``{name, expression, job_template: {type, args, options}}``. Responses
carry the entry under both ``cron_job`` (spec) and ``cron`` (suites, OpenAPI).
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import lifecycle
from django_ojs.api import pagination
from django_ojs.api.permissions import INSPECT, MANAGE
from django_ojs.api.serializers import ts
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import ValidationError
from django_ojs.models import CronJob
from django_ojs.tenancy import tenant_of, with_tenant


def render(entry: CronJob) -> dict[str, Any]:
    template = {"type": entry.type, "args": entry.args, "options": entry.options}
    return {
        "name": entry.name,
        "cron": entry.expression,
        "expression": entry.expression,
        "timezone": entry.timezone,
        **template,
        "job_template": template,
        "overlap_policy": entry.overlap_policy,
        "enabled": entry.enabled,
        "status": "active" if entry.enabled else "paused",
        "description": entry.description or None,
        "origin": entry.origin,
        "next_run_at": ts(entry.next_run_at) if entry.next_run_at else None,
        "last_run_at": ts(entry.last_run_at) if entry.last_run_at else None,
        "last_job_id": str(entry.last_job_id) if entry.last_job_id else None,
        "run_count": entry.run_count,
        "skip_count": entry.skip_count,
        "created_at": ts(entry.created_at),
        "updated_at": ts(entry.updated_at),
    }


def _one(entry: CronJob) -> dict[str, Any]:
    body = render(entry)
    return {"cron_job": body, "cron": body}


def _template(body: dict[str, Any]) -> dict[str, Any]:
    template = body.get("job_template")
    if template is None:
        return {"type": body.get("type"), "args": body.get("args"), "options": body.get("options")}
    if not isinstance(template, dict):
        raise ValidationError("job_template must be an object", field="job_template")
    return {
        "type": template.get("type"),
        "args": template.get("args"),
        "options": template.get("options"),
    }


class CronListView(OJSView):
    """``GET /ojs/v1/cron`` (list) and ``POST /ojs/v1/cron`` (register or update)."""

    operation = {"GET": INSPECT, "POST": MANAGE}

    def get(self, request: Any) -> Response:
        page = pagination.page(request.query_params)
        entries = CronJob.objects.using(settings.DATABASE).order_by("name")
        total = entries.count()
        chunk, meta = pagination.offset_page(entries, total, page)
        rendered = [render(e) for e in chunk]
        return Response({"cron_jobs": rendered, "crons": rendered, "pagination": meta})

    def post(self, request: Any) -> Response:
        body = self.body(request)
        template = _template(body)
        options = self.tenant_options(request, template["options"])
        expression = body.get("cron", body.get("expression"))
        entry, created = lifecycle.register_cron(
            body.get("name"),
            expression,
            template["type"],
            template["args"],
            options=options,
            timezone_name=body.get("timezone") or "UTC",
            overlap_policy=body.get("overlap_policy"),
            enabled=body.get("enabled"),
            description=body.get("description"),
            actor=self.actor(request),
        )
        return Response(
            _one(entry),
            status=201 if created else 200,
            headers={"Location": self.location("cron-detail", entry.name)},
        )

    def tenant_options(self, request: Any, options: Any) -> Any:
        """The entry's job options with the request's tenant in their meta (cron jobs
        carry their ``meta.tenant_id`` into every job they enqueue); 403 for a tenant the
        caller's key may not use."""
        tenant = self.enqueue_tenant(request)
        if not isinstance(options, dict | None):
            return options  # refused by the registration's own validation
        options = dict(options or {})
        key = "metadata" if "metadata" in options and "meta" not in options else "meta"
        if tenant is not None:
            options[key] = with_tenant({"meta": options.get(key)}, tenant)["meta"]
        self.require_job_tenant(request, tenant_of(options.get(key)), MANAGE)
        return options


class CronDetailView(OJSView):
    """``GET``, ``PATCH`` (enable/disable, §8.5) and ``DELETE`` ``/ojs/v1/cron/{name}``."""

    operation = {"GET": INSPECT, "PATCH": MANAGE, "DELETE": MANAGE}

    def get(self, request: Any, name: str) -> Response:
        return Response(_one(lifecycle.get_cron(name)))

    def patch(self, request: Any, name: str) -> Response:
        body = self.body(request)
        unknown = sorted(set(body) - {"enabled"})
        if unknown or "enabled" not in body:
            raise ValidationError(
                'PATCH takes {"enabled": true|false}; re-register (POST) to change the rest',
                field=unknown[0] if unknown else "enabled",
            )
        entry = lifecycle.set_cron_enabled(name, body["enabled"], actor=self.actor(request))
        return Response(_one(entry))

    def delete(self, request: Any, name: str) -> Response:
        entry = lifecycle.delete_cron(name, actor=self.actor(request))
        return Response({"deleted": True, "name": name, "cron": {"name": entry.name}})
