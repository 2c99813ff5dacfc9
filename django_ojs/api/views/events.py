"""``GET /ojs/v1/events``: poll the event table (events §6.4), oldest first.

Filters: ``types``, ``queues``, ``job_types`` (comma-separated or repeated), ``job_id``,
``since`` (RFC 3339) and ``after`` (an event id). Pages are keyset-based, so a poller that
follows ``next_cursor`` (or passes ``cursor`` back as ``after``) sees every event exactly
once. The answer carries events §6.4's ``{events, cursor, has_more}``, the binding's
``pagination`` and, as ``items``, the admin API's list shape.
"""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework.response import Response

from django_ojs import envelope
from django_ojs.api import pagination, serializers
from django_ojs.api.permissions import INSPECT
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import InvalidRequest, ValidationError
from django_ojs.models import Event


def _values(params: Any, name: str) -> list[str]:
    out: list[str] = []
    for raw in params.getlist(name):
        out.extend(v.strip() for v in raw.split(",") if v.strip())
    return out


def _uuid(value: str, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(value.removeprefix("evt_"))
    except ValueError:
        raise InvalidRequest(f"{name} must be an id", details={"field": name}) from None


class EventListView(OJSView):
    operation = INSPECT

    def get(self, request: Any) -> Response:
        params = request.query_params
        page = pagination.page(params)
        # Events carry no tenant: a key limited to tenants may not read them all.
        self.principal(request).require_every_tenant()
        events = Event.objects.using(settings.DATABASE).order_by("seq")
        if (allowed := self.queue_filter(request)) is not None:
            events = events.filter(allowed)  # a queue-limited key sees its queues' events
        if types := _values(params, "types") or _values(params, "type"):
            events = events.filter(type__in=types)
        if queue_names := _values(params, "queues") or _values(params, "queue"):
            events = events.filter(queue__in=queue_names)
        if job_types := _values(params, "job_types"):
            events = events.filter(data__job_type__in=job_types)
        if params.get("job_id"):
            events = events.filter(job_id=_uuid(params["job_id"], "job_id"))
        if params.get("since"):
            try:
                since = envelope.parse_timestamp(params["since"], "since")
            except ValidationError as exc:
                raise InvalidRequest(exc.message, details={"field": "since"}) from None
            events = events.filter(time__gte=since)
        if params.get("after"):
            anchor = Event.objects.using(settings.DATABASE).with_id(_uuid(params["after"], "after"))
            if anchor is None:
                raise InvalidRequest("after names an unknown event", details={"field": "after"})
            events = events.filter(seq__gt=anchor.seq)
        total = events.count()
        if page.after is not None:  # keyset cursor: the last sequence number already seen
            remaining = events.filter(seq__gt=page.after)
            offset = total - remaining.count()
            chunk = list(remaining[: page.limit])
        else:
            offset = page.offset
            chunk = list(events[offset : offset + page.limit])
        seen = offset + len(chunk)
        next_position = {"s": chunk[-1].seq, "o": seen} if chunk and seen < total else None
        page.offset = offset
        rendered = [serializers.event(e) for e in chunk]
        return Response(
            {
                "events": rendered,
                # Events §6.4: the last event's id (for ``after=``) and whether more follow.
                "cursor": rendered[-1]["id"] if rendered else params.get("after"),
                "has_more": next_position is not None,
                # The admin API's list shape (the official admin UI reads ``items``).
                "items": rendered,
                "pagination": page.wrap(total, len(chunk), next_position),
            }
        )
