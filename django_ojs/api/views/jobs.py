"""Job endpoints (HB §9): PUSH, PUSH batch, INFO, CANCEL, ACTIVATE."""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework.response import Response

from django_ojs import envelope, lifecycle
from django_ojs.api import serializers
from django_ojs.api.permissions import CANCEL, ENQUEUE, INSPECT
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import JobNotFound, ValidationError
from django_ojs.models import Job
from django_ojs.policy import default_retry_policy
from django_ojs.tenancy import tenant_of


def _spec(body: Any) -> envelope.JobSpec:
    return envelope.from_wire(
        body, max_bytes=settings.MAX_ENVELOPE_BYTES, retry_base=default_retry_policy()
    )


class JobListView(OJSView):
    """``POST /ojs/v1/jobs``: enqueue one job; 201 with ``Location`` (HB §9.1)."""

    operation = ENQUEUE
    body_required = True

    def post(self, request: Any) -> Response:
        spec = _spec(self.enqueue_body(request, self.body(request)))
        self.require_queue(request, spec.queue, ENQUEUE)
        self.require_job_tenant(request, tenant_of(spec.meta), ENQUEUE)
        job = lifecycle.push(spec)
        if getattr(job, "dropped", False):
            # Middleware §7.2: not enqueued, and not an error.
            return Response({"job": None, "dropped": True}, status=200)
        if getattr(job, "deduplicated", False):
            # unique-jobs §5.4: on_conflict "ignore" answers 200 with the existing job.
            return Response({"job": serializers.job(job), "deduplicated": True}, status=200)
        return Response(
            {"job": serializers.job(job)},
            status=201,
            headers={"Location": self.location("job-detail", str(job.id))},
        )


class JobBatchView(OJSView):
    """``POST /ojs/v1/jobs/batch``: enqueue several jobs, all or none (HB §9.2)."""

    operation = ENQUEUE
    body_required = True

    def post(self, request: Any) -> Response:
        items = serializers.batch_request(self.body(request))
        specs = []
        for index, item in enumerate(items):
            try:
                specs.append(_spec(self.enqueue_body(request, item)))
            except ValidationError as exc:
                exc.details["index"] = index
                exc.message = f"jobs[{index}]: {exc.message}"
                raise
        for spec in specs:
            self.require_queue(request, spec.queue, ENQUEUE)
            self.require_job_tenant(request, tenant_of(spec.meta), ENQUEUE)
        pushed = lifecycle.push_many(specs)
        dropped = [i for i, j in enumerate(pushed) if getattr(j, "dropped", False)]
        jobs = [j for j in pushed if not getattr(j, "dropped", False)]
        rendered = [
            # unique-jobs §5.4: a job an "ignore" policy kept is returned, marked.
            {**serializers.job(j), "deduplicated": True}
            if getattr(j, "deduplicated", False)
            else serializers.job(j)
            for j in jobs
        ]
        body: dict[str, Any] = {"jobs": rendered, "count": len(jobs)}
        if dropped:
            body["dropped"] = dropped  # middleware §9.2: indexes left out by middleware
        return Response(body, status=201)


class JobDetailView(OJSView):
    """``GET`` (INFO, HB §9.3) and ``DELETE`` (CANCEL, HB §9.4) ``/ojs/v1/jobs/{id}``."""

    operation = {"GET": INSPECT, "DELETE": CANCEL}

    def get(self, request: Any, job_id: str) -> Response:
        job = Job.objects.using(settings.DATABASE).filter(pk=_uuid(job_id)).first()
        scope = self.tenant_scope(request)
        if job is None or (scope is not None and job.tenant not in scope):
            raise JobNotFound(job_id)
        self.require_queue(request, job.queue, INSPECT)
        return Response({"job": serializers.job(job)})

    def delete(self, request: Any, job_id: str) -> Response:
        # HB §9.4: cancelling a job that already finished (cancelled included) is 409.
        self.require_job_queue(request, job_id, CANCEL)
        job = lifecycle.cancel(job_id, idempotent=False, actor=self.actor(request))
        return Response({"job": serializers.job(job)})


class JobActivateView(OJSView):
    """``POST /ojs/v1/jobs/{id}/activate``: release a ``pending`` job (HB §9.5)."""

    operation = CANCEL  # a change to one job, like cancel (operator, admin)

    def post(self, request: Any, job_id: str) -> Response:
        self.body(request)  # validates a body if one was sent; none is needed
        self.require_job_queue(request, job_id, CANCEL)
        job = lifecycle.activate(job_id)
        return Response({"job": serializers.job(job)})


def _uuid(job_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(job_id)
    except ValueError:
        raise JobNotFound(job_id) from None


class JobResultView(OJSView):
    """``GET /ojs/v1/jobs/{id}/result[?wait=true&timeout=30]`` (results §8.2, §10.3).

    200 ``{job_id, state, result | error}``; with ``wait``, blocks until the job finishes
    or ``timeout`` seconds (default 30, at most ``OJS_RESULT_WAIT_MAX``) pass: then 408.
    404 for an unknown job, 410 when its result was pruned.
    """

    operation = INSPECT

    def get(self, request: Any, job_id: str) -> Response:
        self.require_job_queue(request, job_id, INSPECT)
        wait = _flag(request.query_params.get("wait"), "wait")
        found: Job | None
        if wait:
            found = lifecycle.wait(job_id, _timeout(request.query_params.get("timeout")))
        else:
            found = Job.objects.using(settings.DATABASE).filter(pk=_uuid(job_id)).first()
        if found is None:
            raise JobNotFound(job_id)
        job = found
        body = lifecycle.result_outcome(job)
        headers = {} if "error" in body or job.state == "completed" else {"Retry-After": "1"}
        return Response(body, headers=headers)


class JobResultsView(OJSView):
    """``POST /ojs/v1/jobs/results`` ``{"ids": [...]}``: many results at once (§10.4)."""

    operation = INSPECT
    body_required = True

    def post(self, request: Any) -> Response:
        ids = self.body(request).get("ids") or []
        if self.principal(request).queues is not None and isinstance(ids, list):
            for job_id in ids[: lifecycle.RESULTS_MAX_IDS]:
                self.require_job_queue(request, job_id, INSPECT)  # a key bound to queues
        return Response({"results": lifecycle.results(ids)})


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in {"false", "0", ""}:
        return False
    if value.lower() in {"true", "1"}:
        return True
    raise ValidationError(f"{name} must be true or false", field=name)


def _timeout(value: str | None) -> float:
    limit = settings.RESULT_WAIT_MAX
    if value is None:
        return min(30.0, limit)
    try:
        seconds = float(value)
    except ValueError:
        raise ValidationError("timeout must be a number of seconds", field="timeout") from None
    if not 0 <= seconds <= limit:
        raise ValidationError(f"timeout must be between 0 and {limit:g} seconds", field="timeout")
    return seconds
