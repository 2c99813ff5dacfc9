"""The OJS error hierarchy.

Every error carries its OJS wire ``code`` (HTTP binding §16.3), an HTTP status, whether a
client may retry, and structured ``details``. No DRF import here: ``api/exceptions.py``
renders these; Python callers catch them directly.
"""

from __future__ import annotations

from typing import Any

from django_ojs.types import JobIdLike, WorkerId


class OJSError(Exception):
    """An OJS operation failed."""

    code: str = "backend_error"
    http_status: int = 500
    retryable: bool = False

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None):
        self.message = message or (self.__doc__ or self.code).strip()
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(self.message)

    def as_dict(self) -> dict[str, Any]:
        """The body of an OJS error object (without ``request_id``)."""
        return {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
            "details": self.details,
        }


class ValidationError(OJSError, ValueError):
    """The job envelope or request is invalid."""

    code = "invalid_payload"
    http_status = 400

    def __init__(
        self,
        message: str | None = None,
        *,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message, details=details)
        self.field = field
        if field is not None:
            self.details.setdefault("field", field)


class NotStorable(ValidationError):
    """A string the job store cannot hold: it contains NUL or an unpaired surrogate."""


class RetryPolicyError(ValidationError):
    """The retry policy is invalid."""

    # OJS retry §11 names the error type ``validation.retry_policy_invalid``; the
    # conformance suites expect HTTP 422 for it.
    http_status = 422
    error_type = "validation_error"


class JobTypeNotAllowed(ValidationError):
    """The job type is not in the configured allowlist (``OJS_ALLOWED_JOB_TYPES``)."""

    # OJS security §8.1: jobs with unregistered types MUST be rejected with 422.
    http_status = 422

    def __init__(self, job_type: str, allowed: tuple[str, ...] | list[str]):
        super().__init__(
            f"Job type '{job_type}' is not allowed on this server (OJS_ALLOWED_JOB_TYPES).",
            field="type",
            details={"type": job_type, "allowed": list(allowed)},
        )
        self.job_type = job_type


class TenantRequired(ValidationError):
    """A job without ``meta.tenant_id`` while ``OJS_TENANT_REQUIRED`` is on."""

    # Multi-tenancy §5.1: jobs without a tenant_id MUST be rejected with 422.
    http_status = 422

    def __init__(self) -> None:
        super().__init__(
            "meta.tenant_id is required: this server runs with OJS_TENANT_REQUIRED "
            "(send it in meta or in the X-OJS-Tenant header)",
            field="meta.tenant_id",
        )


class InvalidRequest(OJSError):
    """The request is malformed."""

    code = "invalid_request"
    http_status = 400


class EnvelopeTooLarge(OJSError):
    """The job envelope exceeds the size limit."""

    code = "envelope_too_large"
    http_status = 413


class PermissionDenied(OJSError):
    """The credentials do not allow this operation on this resource."""

    # OJS security §7: authenticated, but not authorized (403, error catalog OJS-5001).
    code = "permission_denied"
    http_status = 403


class QueueNotAllowed(PermissionDenied):
    """The job is in a queue the caller may not use (``queue``: which one). The HTTP view
    answers it with the caller's own 403 (its name, operation and allowed queues)."""

    def __init__(self, queue: str):
        super().__init__(f"The job is in queue '{queue}', which these credentials may not use.")
        self.queue = queue


class NotFound(OJSError):
    """The resource does not exist."""

    code = "not_found"
    http_status = 404


class JobNotFound(NotFound):
    """The job does not exist."""

    def __init__(self, job_id: JobIdLike, message: str | None = None):
        super().__init__(
            message or f"Job '{job_id}' not found.",
            details={"resource_type": "job", "resource_id": str(job_id)},
        )
        self.job_id = job_id


class CronNotFound(NotFound):
    """No cron job has this name."""

    def __init__(self, name: str):
        super().__init__(f"Cron job '{name}' not found.", details={"name": name})


class PoolNotFound(NotFound):
    """No worker pool has this name (fair scheduling §6)."""

    def __init__(self, name: str):
        super().__init__(
            f"Worker pool '{name}' not found.",
            details={"resource_type": "pool", "resource_id": name},
        )


class WebhookNotFound(NotFound):
    """No webhook subscription has this id."""

    def __init__(self, subscription_id: object):
        super().__init__(
            f"Webhook subscription '{subscription_id}' not found.",
            details={"id": str(subscription_id)},
        )


class WorkflowNotFound(NotFound):
    """The workflow does not exist."""

    def __init__(self, workflow_id: object, message: str | None = None):
        super().__init__(
            message or f"Workflow '{workflow_id}' not found.",
            details={"resource_type": "workflow", "resource_id": str(workflow_id)},
        )
        self.workflow_id = workflow_id


class WaitTimeout(OJSError):
    """The job did not reach a terminal state within the wait (results §8.2: 408)."""

    code = "timeout"
    http_status = 408
    retryable = True


class ResultPruned(OJSError):
    """The job finished but its result was deleted after its ``result_ttl`` (§10.5: 410)."""

    code = "result_pruned"
    http_status = 410


class InvalidTransition(OJSError):
    """The job's current state does not allow this operation."""

    # OJS core §6.3: invalid transitions MUST be rejected. The conformance suite checks the
    # code ``conflict`` (L0-OPS-032) and reads ``details.current_state`` (L0-LC-003).
    code = "conflict"
    http_status = 409

    def __init__(
        self,
        job_id: JobIdLike,
        current_state: str,
        operation: str,
        expected_states: frozenset[str] | set[str] | tuple[str, ...] = (),
        message: str | None = None,
    ):
        expected = sorted(expected_states)
        super().__init__(
            message
            or f"Cannot {operation} job '{job_id}': it is {current_state}"
            + (f" (expected {' or '.join(expected)})." if expected else "."),
            details={
                "job_id": str(job_id),
                "current_state": current_state,
                "attempted_operation": operation,
                "expected_state": expected[0] if len(expected) == 1 else expected,
            },
        )
        self.job_id = job_id
        self.current_state = current_state
        self.operation = operation


class ReservationMismatch(OJSError):
    """The job is reserved by another worker."""

    # OJS worker protocol §5.6: ACK/FAIL from a worker that does not hold the reservation
    # MUST be rejected.
    code = "conflict"
    http_status = 409

    def __init__(self, job_id: JobIdLike, worker_id: WorkerId, holder: WorkerId | None):
        super().__init__(
            f"Job '{job_id}' is reserved by worker '{holder}', not '{worker_id}'.",
            details={
                "job_id": str(job_id),
                "worker_id": worker_id,
                "reserved_by": holder,
                "current_state": "active",
            },
        )


class DuplicateJob(OJSError):
    """A job with the same id or unique key already exists."""

    code = "duplicate"
    http_status = 409


class IdempotencyConflict(OJSError):
    """The idempotency key was used with another request body, or its first request is
    still being processed (bulk operations §10, §11.2)."""

    code = "conflict"
    http_status = 409


class BatchSizeExceeded(OJSError):
    """The bulk request has more items than the server accepts (bulk operations §9.1)."""

    code = "batch_size_exceeded"
    http_status = 413

    def __init__(self, size: int, limit: int):
        super().__init__(
            f"Batch size {size} exceeds maximum of {limit}",
            details={"batch_size": size, "max_batch_size": limit},
        )
        self.limit = limit


class QueuePaused(OJSError):
    """The queue is paused."""

    code = "queue_paused"
    http_status = 422
    retryable = True


class TenantLimitExceeded(OJSError):
    """A tenant has reached one of its limits (multi-tenancy §8.2): the enqueue is refused."""

    code = "tenant_limit_exceeded"
    http_status = 429
    retryable = True

    def __init__(
        self, tenant: str, limit: str, current: int, maximum: int, *, retry_after: int = 30
    ):
        super().__init__(
            f"Tenant '{tenant}' has exceeded {limit} ({maximum})",
            details={"tenant_id": tenant, "limit": limit, "current": current, "maximum": maximum},
        )
        self.tenant, self.limit, self.current, self.maximum = tenant, limit, current, maximum
        #: Seconds after which the client may try again (the ``Retry-After`` header).
        self.retry_after = retry_after


class Unsupported(OJSError):
    """The feature or version is not supported."""

    code = "unsupported"
    http_status = 422


class WorkerNotFound(NotFound):
    """The worker does not exist."""

    def __init__(self, worker_id: WorkerId):
        super().__init__(
            f"Worker '{worker_id}' not found.",
            details={"resource_type": "worker", "resource_id": worker_id},
        )
