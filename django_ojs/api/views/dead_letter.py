"""Dead letter endpoints (HB §12): list discarded jobs, retry one, delete one."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import lifecycle, validation
from django_ojs.api import pagination, serializers
from django_ojs.api.permissions import CANCEL, INSPECT, MANAGE
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import InvalidTransition, JobNotFound
from django_ojs.models import Job


class DeadLetterListView(OJSView):
    """``GET /ojs/v1/dead-letter?queue=&type=``: discarded jobs, newest first (paginated)."""

    operation = INSPECT

    def get(self, request: Any) -> Response:
        params = request.query_params
        page = pagination.page(params)
        jobs = Job.objects.using(settings.DATABASE).dead_letter()
        if (allowed := self.queue_filter(request)) is not None:
            jobs = jobs.filter(allowed)
        if params.get("queue"):
            jobs = jobs.filter(queue=validation.validate_queue(params["queue"]))
        if params.get("type"):
            jobs = jobs.filter(type=params["type"])
        jobs = jobs.order_by("-discarded_at", "-id")
        chunk, meta = pagination.offset_page(jobs, jobs.count(), page)
        return Response({"jobs": [serializers.job(j) for j in chunk], "pagination": meta})


class DeadLetterRetryView(OJSView):
    """``POST /ojs/v1/dead-letter/{id}/retry``: back to ``available`` with ``attempt`` 0."""

    operation = CANCEL  # a change to one job (operator, admin): back into its queue

    def post(self, request: Any, job_id: str) -> Response:
        override = serializers.retry_override(self.body(request))
        self.require_job_queue(request, job_id, CANCEL)
        if override and isinstance(override.get("queue"), str):
            self.require_queue(request, override["queue"], CANCEL)
        try:
            job = lifecycle.retry_discarded(job_id, override=override, actor=self.actor(request))
        except InvalidTransition:
            # HB §12.2: a job that is not discarded is not in the dead letter queue.
            raise JobNotFound(job_id, f"Job '{job_id}' is not in the dead letter queue.") from None
        return Response({"job": serializers.job(job)})


class DeadLetterDetailView(OJSView):
    """``DELETE /ojs/v1/dead-letter/{id}``: delete a discarded job for good."""

    operation = MANAGE  # deleting data for good, like a purge (admin only)

    def delete(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, MANAGE)
        lifecycle.delete_discarded(job_id, actor=self.actor(request))
        return Response({"deleted": True, "job_id": job_id})
