"""Worker endpoints (HB §10): FETCH, ACK, FAIL (nack), BEAT (heartbeat), and progress
(reports, the last report, and its server-sent event stream).

External workers and the in-process ``ojs_worker`` share ``lifecycle.fetch`` and friends.
A worker that never registered is created by its first fetch or heartbeat.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.response import Response

from django_ojs import lifecycle, watch
from django_ojs.api import serializers
from django_ojs.api.permissions import DEQUEUE, INSPECT
from django_ojs.api.views.base import OJSView
from django_ojs.exceptions import NotFound, QueueNotAllowed


class WorkerView(OJSView):
    operation: str | Mapping[str, str] | None = DEQUEUE
    body_required = True


class FetchView(WorkerView):
    """``POST /ojs/v1/workers/fetch`` → ``{"jobs": [...]}`` (empty when there is no work)."""

    def post(self, request: Any) -> Response:
        data = serializers.fetch_request(self.body(request))
        pool = data.pop("pool", None)
        policy = data.pop("policy", None)
        # A fetch for some tenants (X-OJS-Tenant, a key's allowlist) claims only theirs.
        tenants = self.tenant_scope(request)
        if pool is not None:
            # Fair scheduling §5.2: the pool's queues and strategy take precedence over
            # the worker's own.
            fetch = lifecycle.PoolFetch(
                pool,
                worker_id=data["worker_id"],
                visibility_timeout=data["visibility_timeout"],
                tenants=tenants,
            )
            queues = fetch.queues
        else:
            queues = data["queues"]
        for queue in queues:
            self.require_queue(request, queue, DEQUEUE)
        if pool is not None:
            jobs = fetch(data["count"])
        elif policy is not None:
            jobs = lifecycle.fetch_with_policy(
                policy, tenants=tenants, **{k: v for k, v in data.items() if k != "queues"}
            )
        else:
            jobs = lifecycle.fetch(**data, tenants=tenants)
        rendered = [serializers.job(j) for j in jobs]
        body: dict[str, Any] = {"jobs": rendered}
        if rendered:
            body["job"] = rendered[0]  # OpenAPI clients read the first job here
        return Response(body)


class AckView(WorkerView):
    """``POST /ojs/v1/workers/ack``: complete an active job."""

    def post(self, request: Any) -> Response:
        data = serializers.ack_request(self.body(request))
        who = self.principal(request)
        if self.tenant_scope(request) is not None:
            self.require_job_queue(request, data["job_id"], DEQUEUE)
        try:
            # A key limited to some queues completes jobs of those only: checked in the
            # ACK's own statement, not by reading the job's queue first.
            job = lifecycle.ack(
                data["job_id"],
                data["result"],
                worker_id=data["worker_id"],
                fields=serializers.ACK_FIELDS,
                queues=who.queues,
            )
        except QueueNotAllowed as denied:
            who.require_queue(denied.queue, DEQUEUE)  # the caller's own 403
            raise
        return Response(serializers.ack_result(job))


class NackView(WorkerView):
    """``POST /ojs/v1/workers/nack``: report a failed attempt; the retry policy decides."""

    def post(self, request: Any) -> Response:
        data = serializers.nack_request(self.body(request))
        self.require_job_queue(request, data["job_id"], DEQUEUE)
        job = lifecycle.fail(
            data["job_id"], data["error"], worker_id=data["worker_id"], requeue=data["requeue"]
        )
        return Response(serializers.nack_result(job))


class HeartbeatView(WorkerView):
    """``POST /ojs/v1/workers/heartbeat``: extend reservations; reply with the directive."""

    def post(self, request: Any) -> Response:
        beat = lifecycle.beat(**serializers.heartbeat_request(self.body(request)))
        return Response(serializers.heartbeat(beat))


class ProgressStreamView(OJSView):
    """``GET /ojs/v1/jobs/{id}/progress/stream`` (progress §7.2): server-sent events.

    ``event: progress`` for each report, ``event: state`` when a non-terminal state
    changes, then ``completed``, ``failed`` or ``cancelled`` and the end of the stream; a
    ``: heartbeat`` comment after ``OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS`` of silence; at
    most ``OJS_PROGRESS_STREAM_SECONDS`` long (then ``event: timeout``: reconnect). Each
    open stream holds a server thread (WSGI) and a database connection.

    The final event has the id ``end``. A browser's ``EventSource`` reconnects when a
    stream closes, sending ``Last-Event-ID: end``: for a finished job that is a 204, which
    tells it to stop (instead of reconnecting every ``retry`` forever).
    """

    operation = INSPECT

    def get(self, request: Any, job_id: str) -> Any:
        self.require_job_queue(request, job_id, INSPECT)
        seen_end = request.META.get("HTTP_LAST_EVENT_ID") == END_ID
        if seen_end and lifecycle.progress_of(job_id).state in watch.FINAL:
            return HttpResponse(status=204)
        updates = watch.follow(job_id)
        first = next(updates)  # an unknown job is a 404 envelope, not an empty stream
        if request.method == "HEAD":  # no body: do not hold a thread to stream nothing
            return HttpResponse(content_type="text/event-stream; charset=utf-8")
        response = StreamingHttpResponse(
            _sse(first, updates), content_type="text/event-stream; charset=utf-8"
        )
        response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
        return response


#: The id of a stream's final event (``completed``, ``failed``, ``cancelled``).
END_ID = "end"
FINAL_EVENTS = frozenset(watch.FINAL.values())


def _sse(first: watch.Update, rest: Iterator[watch.Update]) -> Iterator[bytes]:
    yield b"retry: 3000\n\n"
    for update in itertools.chain([first], rest):
        if update.kind == "heartbeat":
            yield b": heartbeat\n\n"
        else:
            data = json.dumps(update.data, ensure_ascii=False, default=str)
            last = f"id: {END_ID}\n" if update.kind in FINAL_EVENTS else ""
            yield f"event: {update.kind}\n{last}data: {data}\n\n".encode("utf-8", "replace")


class ProgressView(WorkerView):
    operation = {"POST": DEQUEUE, "PUT": DEQUEUE, "GET": INSPECT}

    """``POST /ojs/v1/workers/progress`` (SDK) and ``PUT /ojs/v1/jobs/{id}/progress``.

    Records a ``job.progress`` event for an active job. Updates for a job that is not
    active are ignored, not refused (progress extension PRG-007): ``accepted`` is false.
    """

    def post(self, request: Any, job_id: str | None = None) -> Response:
        data = serializers.progress_request(self.body(request), job_id)
        self.require_job_queue(request, data["job_id"], DEQUEUE)
        accepted = lifecycle.report_progress(
            data["job_id"],
            data["value"],
            message=data["message"],
            data=data["data"],
            worker_id=data["worker_id"],
        )
        return Response(
            {
                "job_id": data["job_id"],
                "accepted": accepted,
                "progress": data["value"],
                "percentage": round(data["value"] * 100, 3),
            }
        )

    put = post

    def get(self, request: Any, job_id: str | None = None) -> Response:
        """``GET /ojs/v1/jobs/{id}/progress`` (progress §7.1): nulls before any report."""
        if job_id is None:
            raise NotFound("GET needs a job: /ojs/v1/jobs/{id}/progress")
        self.require_job_queue(request, job_id, INSPECT)
        job = lifecycle.progress_of(job_id)
        last = job.last_progress or {}
        return Response(
            {
                "job_id": str(job.id),
                "state": job.state,
                "progress": last.get("progress"),
                "message": last.get("message"),
                "data": last.get("data"),
                "updated_at": last.get("updated_at"),
            }
        )
