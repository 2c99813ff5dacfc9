"""Dead letter endpoints (HB §12, dead-letter extension §10): list, stats, get, retry, delete."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Max, Min, QuerySet
from rest_framework.response import Response

from django_ojs import envelope, lifecycle, retry, validation
from django_ojs.api import pagination, serializers
from django_ojs.api.permissions import CANCEL, INSPECT, MANAGE
from django_ojs.api.views.base import OJSView, bulk_filter
from django_ojs.conf import settings
from django_ojs.exceptions import InvalidTransition, JobNotFound
from django_ojs.models import Job, JobQuerySet


class DeadLetterListView(OJSView):
    """``GET /ojs/v1/dead-letter?queue=&type=``: discarded jobs, newest first (paginated)."""

    operation = INSPECT

    def get(self, request: Any) -> Response:
        params = request.query_params
        page = pagination.page(params)
        jobs = Job.objects.using(settings.DATABASE).dead_letter()
        if (allowed := self.queue_filter(request)) is not None:
            jobs = jobs.filter(allowed)
        if (tenants := self.tenant_filter(request)) is not None:
            jobs = jobs.filter(tenants)
        if params.get("queue"):
            jobs = jobs.filter(queue=validation.validate_queue(params["queue"]))
        if params.get("type"):
            jobs = jobs.filter(type=params["type"])
        jobs = jobs.order_by("-discarded_at", "-id")
        chunk, meta = pagination.offset_page(jobs, jobs.count(), page)
        return Response({"jobs": [serializers.job(j) for j in chunk], "pagination": meta})


def stats(jobs: QuerySet[Job]) -> dict[str, Any]:
    """Dead-letter extension §10.1 statistics of ``jobs`` (already the dead letter).

    ``by_error_type`` counts the type of each job's last error (``Unknown`` without one).
    ``retention.max_age`` is ``OJS_RETENTION["dead_letter"]``; the reaper prunes on its
    prune interval, so ``next_prune_at`` is when the oldest job passes that age.
    """
    by_queue = dict(jobs.values_list("queue").annotate(n=Count("*")).order_by())
    by_error: dict[str, int] = {}
    for error_type, n in jobs.values_list("error__type").annotate(n=Count("*")).order_by():
        key = error_type if isinstance(error_type, str) and error_type else "Unknown"
        by_error[key] = by_error.get(key, 0) + n
    span = jobs.aggregate(oldest=Min("discarded_at"), newest=Max("discarded_at"))
    max_age = settings.RETENTION.get("dead_letter")
    next_prune = span["oldest"] + timedelta(seconds=max_age) if max_age and span["oldest"] else None
    return {
        "total": sum(by_queue.values()),
        "by_queue": by_queue,
        "by_error_type": dict(sorted(by_error.items(), key=lambda kv: (-kv[1], kv[0]))),
        "oldest_at": envelope.format_timestamp(span["oldest"]),
        "newest_at": envelope.format_timestamp(span["newest"]),
        "retention": {
            "max_age": _iso_age(max_age),
            "next_prune_at": envelope.format_timestamp(next_prune),
        },
    }


def _iso_age(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return retry.format_duration_days(seconds * 1000)


def dead_job(jobs: QuerySet[Job], job_id: str) -> Job:
    """The dead-lettered job ``job_id`` of ``jobs``; 404 when it is not in the dead letter."""
    try:
        job = jobs.filter(pk=job_id).first()
    except (ValueError, TypeError, DjangoValidationError):  # not a UUID: no such job
        job = None
    if job is None:
        raise JobNotFound(job_id, f"Job '{job_id}' is not in the dead letter queue.")
    return job


class DeadLetterStatsView(OJSView):
    """``GET /ojs/v1/dead-letter/stats``: counts by queue and error type (DLQ §10.1)."""

    operation = INSPECT

    def get(self, request: Any) -> Response:
        jobs = Job.objects.using(settings.DATABASE).dead_letter()
        if (allowed := self.queue_filter(request)) is not None:
            jobs = jobs.filter(allowed)
        if (tenants := self.tenant_filter(request)) is not None:
            jobs = jobs.filter(tenants)
        return Response(stats(jobs))


def retry_matching(view: OJSView, request: Any, jobs: JobQuerySet) -> dict[str, Any]:
    """Retry every dead-lettered job of ``jobs`` the body's ``filter`` matches (DLQ §6.2).

    The body is ``{"filter": {queue?, type?, since?, until?, error_type?, ...}, "confirm":
    true}`` (an absent or empty filter: every dead-lettered job the caller may see). Each
    job goes back as :func:`lifecycle.retry_discarded` sends one, 200 at a time. The answer
    is the bulk result ``{action, matched, succeeded, failed, errors}`` plus ``retried``
    (OpenAPI's name for ``succeeded``).
    """
    matching = bulk_filter(view.body(request)).apply(jobs.dead_letter())
    out = lifecycle.bulk("retry", matching, actor=view.actor(request))
    return {**out, "retried": out["succeeded"]}


class DeadLetterBulkRetryView(OJSView):
    """``POST /ojs/v1/dead-letter/retry`` ``{filter?, confirm}`` (DLQ §6.2): bulk retry."""

    operation = CANCEL  # like retrying one: operators and admins
    body_required = True

    def post(self, request: Any) -> Response:
        jobs = Job.objects.using(settings.DATABASE).all()
        allowed = self.queue_filter(request)
        if allowed is not None:
            jobs = jobs.filter(allowed)
        if (tenants := self.tenant_filter(request)) is not None:
            jobs = jobs.filter(tenants)
        return Response(retry_matching(self, request, jobs))


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
    """``GET`` / ``DELETE /ojs/v1/dead-letter/{id}``: a discarded job; delete it for good."""

    # Deleting data for good is like a purge (admin only); reading is inspection.
    operation = {"GET": INSPECT, "DELETE": MANAGE}

    def get(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, INSPECT)
        job = dead_job(Job.objects.using(settings.DATABASE).dead_letter(), job_id)
        return Response({"job": serializers.job(job)})

    def delete(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, MANAGE)
        lifecycle.delete_discarded(job_id, actor=self.actor(request))
        return Response({"deleted": True, "job_id": job_id})
