"""Queue endpoints (HB §11): list, details (queue config §9.3), statistics, pause, resume."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.response import Response

from django_ojs import lifecycle, queues, validation
from django_ojs.api import pagination, queueconfig, serializers
from django_ojs.api.permissions import INSPECT, MANAGE
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import NotFound
from django_ojs.models import Job


def _known(name: str) -> queues.QueueInfo:
    """The queue's info if it exists: a ``Queue`` row, ``default``, or jobs that name it."""
    validation.validate_queue(name)
    for info in queues.list_queues():
        if info.name == name:
            return info
    if Job.objects.using(settings.DATABASE).filter(queue=name).exists():
        return queues.QueueInfo(name)
    raise NotFound(
        f"Queue '{name}' not found.", details={"resource_type": "queue", "resource_id": name}
    )


class QueueListView(OJSView):
    """``GET /ojs/v1/queues``: every known queue, ``default`` always included (paginated)."""

    operation = INSPECT

    def get(self, request: Any) -> Response:
        page = pagination.page(request.query_params)
        who = self.principal(request)
        infos = [i for i in queues.list_queues() if who.may_use(i.name)]
        chunk, meta = pagination.offset_page(infos, len(infos), page)
        return Response({"queues": [serializers.queue(i) for i in chunk], "pagination": meta})


class QueueStatsView(OJSView):
    """``GET /ojs/v1/queues/{name}/stats``: jobs of the queue by state."""

    operation = INSPECT

    def get(self, request: Any, name: str) -> Response:
        self.require_queue(request, name, INSPECT)
        info = _known(name)
        # A caller limited to some tenants (X-OJS-Tenant, the key's) counts only theirs.
        counts = queues.counts(name, tenants=self.tenant_scope(request))
        return Response(serializers.queue_stats(info, counts, timezone.now()))


class QueueDetailView(OJSView):
    """``GET /ojs/v1/queues/{name}`` (queue config §9.3): the queue's state, configuration
    and statistics in one answer.

    The spec's fields are top-level (``name``, ``state``, ``config``, ``stats``,
    ``created_at``); the same queue is also under ``queue``, as the other queue endpoints
    answer and the extension suites read it (EXT-MT-004: ``$.queue.name``). Statistics are
    :class:`QueueStatsView`'s, scoped the same way to the caller's tenants; a queue is
    unknown (404) exactly when ``/stats`` says so. ``updated_at`` is left out: a queue's
    row does not record when its configuration last changed.
    """

    operation = INSPECT

    def get(self, request: Any, name: str) -> Response:
        self.require_queue(request, name, INSPECT)
        info = _known(name)
        counts = queues.counts(name, tenants=self.tenant_scope(request))
        stats = serializers.queue_stats(info, counts, timezone.now())
        config = queueconfig.render(info)
        body = {
            "name": info.name,
            "state": stats["status"],
            "config": config,
            "stats": stats["stats"],
            "created_at": serializers.ts(info.created_at),
        }
        return Response(
            {
                **body,
                "queue": {**stats["queue"], **body},
                "status": stats["status"],
                "paused": info.paused,
                "computed_at": stats["computed_at"],
            }
        )


class QueuePauseView(OJSView):
    """``POST /ojs/v1/queues/{name}/pause``: stop fetches; enqueueing still works."""

    operation = MANAGE

    def post(self, request: Any, name: str) -> Response:
        self.body(request)
        self.require_queue(request, name, MANAGE)
        queue = lifecycle.pause_queue(name, actor=self.actor(request))
        info = queues.QueueInfo(queue.name, queue.paused, queue.paused_at, queue.created_at)
        body = serializers.queue(info)
        return Response({"queue": body, "status": body["status"], "paused_at": body["paused_at"]})


class QueueResumeView(OJSView):
    """``POST /ojs/v1/queues/{name}/resume``: let workers fetch again."""

    operation = MANAGE

    def post(self, request: Any, name: str) -> Response:
        self.body(request)
        self.require_queue(request, name, MANAGE)
        queue = lifecycle.resume_queue(name, actor=self.actor(request))
        info = queues.QueueInfo(queue.name, queue.paused, queue.paused_at, queue.created_at)
        body = serializers.queue(info)
        return Response(
            {
                "queue": body,
                "status": body["status"],
                "resumed_at": serializers.ts(timezone.now()),
            }
        )


class QueueConfigView(OJSView):
    """``GET``/``PUT /ojs/v1/queues/{name}/config`` (and ``/ojs/v1/admin/queues/{name}/config``).

    The queue-level limit (rate-limiting §7.2): ``{"concurrency": N}`` (also accepted under
    ``limits`` or ``rate_limit``), and the queue's own retention of its finished jobs
    (queue config §6.3, admin API §6.6) in ISO 8601 durations:
    ``{"retention": {"completed": "P14D"}}``. PUT sets the whole configuration and takes
    back what GET returned unchanged (:mod:`django_ojs.api.queueconfig`).
    """

    operation = {"GET": INSPECT, "PUT": MANAGE}

    def get(self, request: Any, name: str) -> Response:
        self.require_queue(request, name, INSPECT)
        info = _known(name)
        return Response({"queue": serializers.queue(info), "config": queueconfig.render(info)})

    def put(self, request: Any, name: str) -> Response:
        body = self.body(request)
        self.require_queue(request, name, MANAGE)
        validation.validate_queue(name)
        current = {i.name: i for i in queues.list_queues()}.get(name, queues.QueueInfo(name))
        limits, retention = queueconfig.parse(body, current)
        queue = lifecycle.configure_queue(
            name, limits=limits, retention=retention, actor=self.actor(request)
        )
        info = queues.QueueInfo(
            queue.name, queue.paused, queue.paused_at, queue.created_at,
            limits=queue.limits, retention=queue.retention,
        )  # fmt: skip
        return Response({"queue": serializers.queue(info), "config": queueconfig.render(info)})
