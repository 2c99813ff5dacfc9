"""The structured error of a failed attempt (OJS core §8, HTTP binding §10.3, retry §10.1).

Pure: turns what a worker reports (HTTP ``{code, message, retryable, details}``, core
``{type, message, backtrace}``, or a plain string) into the stored history entry, the
union of every spec's shape (digest §1.6).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_ojs import envelope, validation
from django_ojs.exceptions import NotStorable, ValidationError

DEFAULT_CODE = "handler_error"
#: Error type of an attempt whose result the job store cannot hold (NUL, lone surrogate).
RESULT_NOT_STORABLE = "result_not_storable"
#: Error type recorded when the database refused a reported error itself.
ERROR_NOT_STORABLE = "error_not_storable"
MAX_MESSAGE_CHARS = 10_000
_OWN_KEYS = frozenset(
    {"code", "type", "message", "retryable", "details", "backtrace", "stack_trace"}
)


def result_not_storable(reason: str) -> dict[str, Any]:
    """The error that fails an attempt whose handler returned a result the store cannot hold.

    Not retryable: the handler succeeded, so running it again would repeat its effects
    only to return the same result.
    """
    return {
        "code": RESULT_NOT_STORABLE,
        "type": RESULT_NOT_STORABLE,
        "message": f"The handler's result cannot be stored: {reason}",
        "retryable": False,
    }


def invalid_result(reason: str) -> dict[str, Any]:
    """The error that fails an attempt whose handler returned a value that is not JSON."""
    return {
        "code": "handler_error",
        "type": "invalid_result",
        "message": f"The handler returned a value that is not JSON-native: {reason}",
        "retryable": False,
    }


def error_not_storable(reason: str) -> dict[str, Any]:
    """The error recorded instead of a reported one the database refused.

    The attempt did fail, so its retry policy applies as usual.
    """
    return {
        "code": ERROR_NOT_STORABLE,
        "type": ERROR_NOT_STORABLE,
        "message": f"The reported error cannot be stored: {reason}",
    }


def entry(error: object, *, attempt: int, now: datetime, sanitize: bool = False) -> dict[str, Any]:
    """Validate ``error`` and return the history entry for attempt ``attempt``.

    ``type`` defaults to ``code`` and ``code`` to ``"handler_error"``. A backtrace may come
    as ``backtrace`` (a list of lines, or a string), ``stack_trace`` or
    ``details.traceback``. Extra keys (``timeout_kind``, ``limit_seconds``…) are kept.
    ``sanitize``: replace NUL and unpaired surrogates with U+FFFD
    (:func:`~django_ojs.validation.storable_text`) instead of refusing the report.
    """
    if isinstance(error, str):
        error = {"message": error}
    if error is None:
        error = {}
    if not isinstance(error, dict):
        raise ValidationError("error must be an object", field="error")
    try:
        data: dict[str, Any] = validation.check_json(error, "error")
    except NotStorable:
        if not sanitize:
            raise
        data = validation.check_json(validation.storable_text(error), "error")
    code = data.get("code") or None
    type_ = data.get("type") or None
    for name, value in (("code", code), ("type", type_)):
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"error.{name} must be a string", field=f"error.{name}")
    message = data.get("message", "")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise ValidationError("error.message must be a string", field="error.message")
    retryable = data.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise ValidationError("error.retryable must be a boolean", field="error.retryable")
    details = data.get("details")
    if details is not None and not isinstance(details, dict):
        raise ValidationError("error.details must be an object", field="error.details")
    backtrace = data.get("backtrace", data.get("stack_trace"))
    if backtrace is None and details and isinstance(details.get("traceback"), str):
        backtrace = details["traceback"]
    if isinstance(backtrace, str):
        backtrace = backtrace.splitlines()
    if backtrace is not None and (
        not isinstance(backtrace, list) or not all(isinstance(line, str) for line in backtrace)
    ):
        raise ValidationError(
            "error.backtrace must be an array of strings", field="error.backtrace"
        )

    stamp = envelope.format_timestamp(now)
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in _OWN_KEYS}
    out.update(
        {
            "code": code or DEFAULT_CODE,
            "type": type_ or code or DEFAULT_CODE,
            "message": message[:MAX_MESSAGE_CHARS],
            "attempt": attempt,
            "occurred_at": stamp,
            "timestamp": stamp,
        }
    )
    if retryable is not None:
        out["retryable"] = retryable
    if details:
        out["details"] = details
    if backtrace:
        out["backtrace"] = backtrace
    return out


def summary(error: dict[str, Any]) -> dict[str, Any]:
    """The short form events carry: ``{code, type, message, retryable}``."""
    return {
        "code": error.get("code"),
        "type": error.get("type"),
        "message": error.get("message"),
        "retryable": error.get("retryable", True),
    }
