"""The bulk-operations extension (``ojs-bulk-operations.md`` §11): ``POST /ojs/v1/jobs/bulk``
and ``/jobs/bulk/{cancel,retry,delete}``, with per-item results, ``atomic`` or ``partial``
mode, a size limit (413) and idempotency keys.

Parse, check the limit, then one ``lifecycle.idempotent`` call running the lifecycle's
``bulk_enqueue``/``bulk_change``; render. (The admin API's filter-only bulk actions are
``/admin/jobs/bulk/...``, ``api/views/admin.py``.)
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Q
from rest_framework.response import Response

from django_ojs import envelope, lifecycle
from django_ojs.api import serializers
from django_ojs.api.permissions import CANCEL, ENQUEUE, MANAGE
from django_ojs.api.views.base import OJSView, refuse_unknown
from django_ojs.conf import settings
from django_ojs.exceptions import BatchSizeExceeded, InvalidRequest, OJSError, ValidationError
from django_ojs.models import Job
from django_ojs.policy import default_retry_policy
from django_ojs.states import TERMINAL_STATES, JobState
from django_ojs.tenancy import tenant_of
from django_ojs.validation import check_text

#: Which jobs a filter selects when it names no state (§6.1; §7 and §8 by their rules).
DEFAULT_STATES = {
    "cancel": ["available", "scheduled"],
    "retry": ["discarded", "retryable"],
    "delete": sorted(TERMINAL_STATES),
}
FILTER_FIELDS = {
    "type", "queue", "state", "enqueued_before", "enqueued_after", "priority", "meta",
}  # fmt: skip
_META_KEY = re.compile(r"[A-Za-z0-9_-]{1,128}")


class BulkView(OJSView):
    body_required = True
    #: ``enqueue``, ``cancel``, ``retry`` or ``delete``.
    bulk_operation = ""

    def idempotency_key(self, request: Any, body: dict[str, Any]) -> Any:
        """The ``Idempotency-Key`` header, else the body's ``idempotency_key`` (§11.3)."""
        header = request.META.get("HTTP_IDEMPOTENCY_KEY")
        return header if header is not None else body.get("idempotency_key")

    def atomicity(self, body: dict[str, Any]) -> str:
        value = body.get("atomicity", "partial")
        if value not in lifecycle.BULK_ATOMICITY:
            raise InvalidRequest(
                'atomicity must be "atomic" or "partial"', details={"field": "atomicity"}
            )
        return str(value)

    def answer(self, request: Any, body: dict[str, Any], run: Any) -> Response:
        key = self.idempotency_key(request, body)
        if key is not None and not isinstance(key, str):
            raise ValidationError("idempotency_key must be a string", field="idempotency_key")
        request_body = {k: v for k, v in body.items() if k != "idempotency_key"}
        status, data, replayed = lifecycle.idempotent(self.bulk_operation, key, request_body, run)
        response = Response(data, status=status)
        response["X-OJS-Batch-Size"] = str(data.get("total", data.get("total_matched", 0)))
        if replayed:
            response["Idempotent-Replayed"] = "true"
        return response


def _limit(size: int) -> None:
    limit = settings.BULK_MAX_ITEMS
    if size > limit:
        raise BatchSizeExceeded(size, limit)


def _error(exc: OJSError) -> dict[str, Any]:
    return exc.as_dict()


def _status(items: list[lifecycle.BulkItem], all_ok: int) -> int:
    """§5.3, §11.2: all succeeded → ``all_ok``; none → 422; some → 207 Multi-Status."""
    done = sum(1 for item in items if item.ok)
    if done == len(items):
        return all_ok
    return 422 if done == 0 else 207


class BulkEnqueueView(BulkView):
    """``POST /ojs/v1/jobs/bulk`` ``{jobs, atomicity?, idempotency_key?}`` (§5)."""

    operation = ENQUEUE
    bulk_operation = "enqueue"

    def post(self, request: Any) -> Response:
        body = self.body(request)
        refuse_unknown(body, {"jobs", "atomicity", "idempotency_key"})
        jobs = body.get("jobs")
        if not isinstance(jobs, list) or not jobs:
            raise ValidationError("jobs must be a non-empty array", field="jobs")
        _limit(len(jobs))
        atomicity = self.atomicity(body)

        def run() -> tuple[int, dict[str, Any]]:
            retry_base = default_retry_policy()
            specs: list[envelope.JobSpec | OJSError] = []
            for item in jobs:
                try:
                    spec = envelope.from_wire(
                        self.enqueue_body(request, item),
                        max_bytes=settings.MAX_ENVELOPE_BYTES,
                        retry_base=retry_base,
                    )
                    self.require_queue(request, spec.queue, ENQUEUE)
                    self.require_job_tenant(request, tenant_of(spec.meta), ENQUEUE)
                    specs.append(spec)
                except OJSError as exc:
                    specs.append(exc)
            items = lifecycle.bulk_enqueue(specs, atomicity=atomicity)
            rendered = []
            for item in items:
                out: dict[str, Any] = {"index": item.index, "status": item.status}
                if item.job is not None:
                    out["job"] = serializers.job(item.job)
                if item.error is not None:
                    out["error"] = _error(item.error)
                rendered.append(out)
            done = sum(1 for item in items if item.ok)
            data = {"total": len(items), "succeeded": done, "failed": len(items) - done,
                    "atomicity": atomicity, "items": rendered}  # fmt: skip
            return _status(items, 201), data

        return self.answer(request, body, run)


class BulkChangeView(BulkView):
    """``POST /ojs/v1/jobs/bulk/{cancel,retry,delete}`` ``{job_ids | filter, atomicity?,
    idempotency_key?}`` (§6 to §8)."""

    operation = CANCEL

    def post(self, request: Any) -> Response:
        body = self.body(request)
        refuse_unknown(body, {"job_ids", "filter", "atomicity", "idempotency_key"})
        if ("job_ids" in body) == ("filter" in body):
            raise InvalidRequest(
                "Send either job_ids or filter, not both and not neither.",
                details={"field": "job_ids"},
            )
        atomicity = self.atomicity(body)
        if "job_ids" in body:
            ids = body["job_ids"]
            if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
                raise ValidationError(
                    "job_ids must be a non-empty array of strings", field="job_ids"
                )
            _limit(len(ids))
            for job_id in ids:
                self.require_job_queue(request, job_id, self.operation_of(request))
        else:
            ids = self.matching(request, body["filter"])
        operation = self.bulk_operation

        def run() -> tuple[int, dict[str, Any]]:
            items = lifecycle.bulk_change(
                operation, ids, atomicity=atomicity, actor=self.actor(request)
            )
            rendered = []
            for item in items:
                out: dict[str, Any] = {
                    "index": item.index, "job_id": item.job_id, "status": item.status,
                }  # fmt: skip
                if item.error is not None:
                    out["reason"] = item.error.message
                    out["error"] = _error(item.error)
                rendered.append(out)
            ok = sum(1 for item in items if item.ok)
            data = {"total_matched": len(items), lifecycle_done(operation): ok,
                    "skipped": len(items) - ok, "atomicity": atomicity, "items": rendered}  # fmt: skip
            return (_status(items, 200) if items else 200), data

        return self.answer(request, body, run)

    def operation_of(self, request: Any) -> str:
        op = self.operation
        return op if isinstance(op, str) else op[request.method]

    def matching(self, request: Any, raw: Any) -> list[str]:
        """Ids of the jobs ``raw`` (the §6.1 filter) selects, oldest first; 413 past the
        limit (narrow the filter, or use the admin API's ``/admin/jobs/bulk/...``)."""
        jobs = Job.objects.using(settings.DATABASE).filter(_filter(raw, self.bulk_operation))
        allowed = self.queue_filter(request)
        if allowed is not None:
            jobs = jobs.filter(allowed)
        if (tenants := self.tenant_filter(request)) is not None:
            jobs = jobs.filter(tenants)
        limit = settings.BULK_MAX_ITEMS
        ids = [str(i) for i in jobs.order_by("id").values_list("id", flat=True)[: limit + 1]]
        if len(ids) > limit:
            raise BatchSizeExceeded(jobs.count(), limit)
        return ids


def lifecycle_done(operation: str) -> str:
    """The response's count of successes (§6.2): ``cancelled``, ``retried``, ``deleted``."""
    return {"cancel": "cancelled", "retry": "retried", "delete": "deleted"}[operation]


class BulkCancelView(BulkChangeView):
    operation = CANCEL
    bulk_operation = "cancel"


class BulkRetryView(BulkChangeView):
    operation = CANCEL  # as a retry from the dead letter
    bulk_operation = "retry"


class BulkDeleteView(BulkChangeView):
    operation = MANAGE  # destructive (admin API §13.1: ojs:admin:purge)
    bulk_operation = "delete"


def _filter(raw: Any, operation: str) -> Q:
    """The §6.1 filter as a query: every field optional, ``state`` defaulting per operation."""
    if not isinstance(raw, dict):
        raise InvalidRequest("filter must be an object", details={"field": "filter"})
    unknown = sorted(set(raw) - FILTER_FIELDS)
    if unknown:
        raise InvalidRequest(
            f"Unknown filter field '{unknown[0]}' (known: {', '.join(sorted(FILTER_FIELDS))})",
            details={"field": f"filter.{unknown[0]}"},
        )
    q = Q()
    for name in ("type", "queue"):
        if name in raw:
            if not isinstance(raw[name], str) or not raw[name]:
                raise ValidationError(f"filter.{name} must be a string", field=f"filter.{name}")
            check_text(raw[name], f"filter.{name}")
            q &= Q(**{name: raw[name]})
    states = raw.get("state", DEFAULT_STATES[operation])
    if isinstance(states, str):
        states = [states]
    valid = {s.value for s in JobState}
    if not isinstance(states, list) or not states or not all(s in valid for s in states):
        raise ValidationError(
            f"filter.state must be a non-empty array of states ({', '.join(sorted(valid))})",
            field="filter.state",
        )
    q &= Q(state__in=states)
    for name, lookup in (
        ("enqueued_before", "created_at__lt"),
        ("enqueued_after", "created_at__gt"),
    ):
        if name in raw:
            q &= Q(**{lookup: envelope.parse_timestamp(raw[name], f"filter.{name}")})
    if "priority" in raw:
        priority = raw["priority"]
        if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > 2**31:
            raise ValidationError("filter.priority must be an integer", field="filter.priority")
        q &= Q(priority=priority)
    if "meta" in raw:
        meta = raw["meta"]
        if not isinstance(meta, dict):
            raise ValidationError("filter.meta must be an object", field="filter.meta")
        for key, value in meta.items():
            if not _META_KEY.fullmatch(key) or "__" in key:
                raise ValidationError(
                    f"filter.meta key {key[:64]!r}: letters, digits, '-' and '_' only",
                    field="filter.meta",
                )
            if not isinstance(value, str | int | float | bool) or value is None:
                raise ValidationError(
                    "filter.meta values must be strings, numbers or booleans", field="filter.meta"
                )
            if isinstance(value, str):
                check_text(value, "filter.meta")
            elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
                raise ValidationError("filter.meta numbers must fit 2**53", field="filter.meta")
            q &= Q(**{f"meta__{key}": value})
    return q
