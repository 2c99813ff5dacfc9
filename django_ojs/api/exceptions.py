"""Every error of the HTTP API as the OJS error envelope (HB §16).

``{"error": {code, message, retryable, details, request_id, hint, docs_url}}`` for OJS
errors, DRF errors (401, 403, 404, 405, parse errors, 415 → 400) and unexpected ones
(logged, then 500/503 ``backend_error``). Rendering only: no state changes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, DataError
from django.http import Http404
from django.utils import timezone
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from django_ojs.exceptions import BatchSizeExceeded, OJSError, TenantLimitExceeded

logger = logging.getLogger("django_ojs.api")
#: Authentication failures and permission denials, one JSON line each (OJS security §11,
#: SEC-018). Never a credential: keys are named by their public prefix only.
audit_logger = logging.getLogger("django_ojs.audit")

#: ojs-errors §4 publishes one page per canonical (upper-case) code.
DOCS_URL = "https://openjobspec.org/errors/{code}"
_CANONICAL = {
    "conflict": "INVALID_STATE_TRANSITION",
    "duplicate": "DUPLICATE_JOB",
    "unsupported": "UNSUPPORTED_FEATURE",
    "backend_error": "BACKEND_ERROR",
}
HINTS = {
    "invalid_payload": "Fix the field named in details.field and send the request again.",
    "invalid_request": "Send a JSON object with Content-Type: application/openjobspec+json "
    "(or application/json).",
    "not_found": "Check the id or path. Finished jobs are deleted after their retention "
    "period (OJS_RETENTION).",
    "conflict": "The job is not in a state that allows this operation; "
    "details.current_state says where it is.",
    "duplicate": "A job with this id or unique key exists; details.existing_job_id names it.",
    "envelope_too_large": "Send a smaller body; large payloads belong in external storage.",
    "unauthenticated": "Send 'Authorization: Bearer <key>' with a key from "
    "'manage.py ojs_apikey create'.",
    "permission_denied": "Use a key whose scope allows this endpoint (details.required_scopes) "
    "and whose queue allowlist has the queue (details.allowed_queues).",
    "unsupported": "Send OJS-Version: 1.0 or omit the header.",
    "queue_paused": "Resume the queue or wait.",
    "backend_error": "Retry later; the server logged the cause.",
}


def error_body(
    code: str,
    message: str,
    *,
    retryable: bool = False,
    details: dict[str, Any] | None = None,
    request_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The OJS error envelope (HB §16.1 plus ``hint``/``docs_url`` from ojs-errors §3)."""
    url = DOCS_URL.format(code=_CANONICAL.get(code, code.upper()))
    body: dict[str, Any] = {
        "code": code,
        "message": message,
        "retryable": retryable,
        "details": details or {},
        "request_id": request_id,
        "hint": HINTS.get(code, "See the django-ojs HTTP API reference."),
        "docs_url": url,
        "doc_url": url,  # ojs-errors §3 spells it doc_url; conformance reads docs_url
    }
    body.update(extra)
    return {"error": body}


def _request_id(context: dict[str, Any]) -> str | None:
    request = context.get("request")
    django_request = getattr(request, "_request", request)
    return getattr(django_request, "ojs_request_id", None)


def _from_drf(exc: drf.APIException, context: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    detail = exc.detail if isinstance(exc.detail, str) else None
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        # DRF sets 403 when no authenticator offers a WWW-Authenticate challenge.
        status = exc.status_code
        code = "unauthenticated" if status == 401 else "permission_denied"
        return status, {"code": code, "message": str(exc.detail)}
    if isinstance(exc, drf.PermissionDenied):
        details = getattr(exc, "ojs_details", {})
        return 403, {"code": "permission_denied", "message": str(exc.detail), "details": details}
    if isinstance(exc, drf.NotFound):
        return 404, {"code": "not_found", "message": str(exc.detail)}
    if isinstance(exc, drf.MethodNotAllowed):
        view = context.get("view")
        allowed = sorted(getattr(view, "allowed_methods", []) or [])
        return 405, {
            "code": "invalid_request",
            "message": str(exc.detail),
            "details": {"allowed_methods": allowed},
        }
    if isinstance(exc, drf.UnsupportedMediaType):
        # HB §4.1: an unsupported content type is 400, not DRF's 415.
        request = context.get("request")
        given = (getattr(request, "content_type", "") or "").split(";", 1)[0].strip()
        what = f"Content-Type {given!r} is not supported" if given else "Content-Type is missing"
        return 400, {
            "code": "invalid_request",
            "message": f"{what}: send application/openjobspec+json or application/json.",
            "details": {"content_type": given or None},
        }
    if isinstance(exc, drf.ParseError):
        return 400, {"code": "invalid_payload", "message": str(exc.detail)}
    if isinstance(exc, drf.Throttled):
        return 429, {"code": "rate_limited", "message": str(exc.detail), "retryable": True}
    if isinstance(exc, drf.ValidationError):
        return 400, {
            "code": "invalid_request",
            "message": "The request is invalid.",
            "details": {"errors": exc.detail},
        }
    return exc.status_code, {"code": "invalid_request", "message": detail or str(exc)}


def _audit_denial(
    context: dict[str, Any], status: int, code: str, details: dict[str, Any], request_id: Any
) -> None:
    request = context.get("request")
    django_request = getattr(request, "_request", request)
    meta = getattr(django_request, "META", {})
    auth = getattr(request, "auth", None) if status == 403 else None
    user = getattr(request, "user", None)
    principal = getattr(auth, "principal", None) or (
        f"user:{user.get_username()}"
        if status == 403 and user is not None and getattr(user, "is_authenticated", False)
        else "unknown"
    )
    entry = {
        "timestamp": timezone.now().isoformat(),
        "event_type": "auth.login_failure" if status == 401 else "authz.permission_denied",
        "principal": principal,
        "source_ip": meta.get("REMOTE_ADDR", ""),
        "correlation_id": request_id,
        "outcome": "failure",
        "detail": {
            "endpoint": f"{getattr(django_request, 'method', '')} "
            f"{getattr(django_request, 'path', '')}",
            "code": code,
            **{k: v for k, v in details.items() if k in ("operation", "queue", "required_scopes")},
        },
    }
    audit_logger.warning(json.dumps(entry, default=str))


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF ``EXCEPTION_HANDLER`` for the OJS views: always an OJS envelope, never None."""
    request_id = _request_id(context)
    headers: dict[str, str] = {}
    if isinstance(exc, OJSError):
        status = exc.http_status
        fields: dict[str, Any] = exc.as_dict()
        error_type = getattr(exc, "error_type", None)
        if error_type:
            fields["type"] = error_type  # conformance L1-RTR-011/012 read error.type
        if isinstance(exc, BatchSizeExceeded):
            # Bulk operations §9.1 puts the limit in the error, §11.3 in a header too.
            fields["max_batch_size"] = exc.limit
            headers["X-OJS-Max-Batch-Size"] = str(exc.limit)
        if isinstance(exc, TenantLimitExceeded):
            # Multi-tenancy §8.2 gives the limit's fields in the error itself.
            fields.update({k: exc.details[k] for k in ("tenant_id", "limit", "current", "maximum")})
            headers["Retry-After"] = str(exc.retry_after)
    elif isinstance(exc, Http404):
        status, fields = 404, {"code": "not_found", "message": str(exc) or "Not found."}
    elif isinstance(exc, DjangoPermissionDenied):
        status, fields = 403, {"code": "permission_denied", "message": str(exc) or "Forbidden."}
    elif isinstance(exc, drf.APIException):
        status, fields = _from_drf(exc, context)
        auth_header = getattr(exc, "auth_header", None)  # set by APIView for 401s
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        if isinstance(exc, drf.MethodNotAllowed):
            headers["Allow"] = ", ".join(fields["details"]["allowed_methods"])
        if isinstance(exc, drf.Throttled):
            # DRF sets Throttled.wait (seconds, rounded up); djangorestframework-stubs omit it.
            wait: float | None = exc.wait  # type: ignore[attr-defined]
            if wait is not None:
                headers["Retry-After"] = str(int(wait))
    elif isinstance(exc, DataError):
        # A safety net: validation refuses what the store cannot hold before it gets there
        # (validation.py). Whatever still slips through is the client's value, not an
        # outage: 400, never a retryable 5xx (a retried ack would fail forever).
        logger.warning(
            "the job store refused a value in an OJS API request (%s): %s", request_id, exc
        )
        status = 400
        fields = {
            "code": "invalid_request",
            "message": "The job store cannot hold a value in this request (a number out of "
            "range, or text it cannot store).",
        }
    elif isinstance(exc, DatabaseError):
        logger.exception("database error in an OJS API request (%s)", request_id)
        status = 503
        fields = {
            "code": "backend_error",
            "message": "The job store is unavailable.",
            "retryable": True,
        }
    else:
        logger.exception("unexpected error in an OJS API request (%s)", request_id)
        status = 500
        fields = {
            "code": "backend_error",
            "message": "Internal server error.",
            "retryable": True,
        }
    set_rollback()
    code = fields.pop("code")
    message = fields.pop("message")
    if status in (401, 403):
        _audit_denial(context, status, code, fields.get("details") or {}, request_id)
    return Response(
        error_body(code, message, request_id=request_id, **fields),
        status=status,
        headers=headers,
    )
