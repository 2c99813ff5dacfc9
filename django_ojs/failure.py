"""The structured error of a failed attempt (OJS core §8, HTTP binding §10.3, retry §10.1).

Pure: turns what a worker reports (HTTP ``{code, message, retryable, details}``, core
``{type, message, backtrace}``, or a plain string) into the stored history entry, the
union of every spec's shape (digest §1.6).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_ojs import envelope, validation
from django_ojs.exceptions import ValidationError

DEFAULT_CODE = "handler_error"
MAX_MESSAGE_CHARS = 10_000
_OWN_KEYS = frozenset(
    {"code", "type", "message", "retryable", "details", "backtrace", "stack_trace"}
)


def entry(error: object, *, attempt: int, now: datetime) -> dict[str, Any]:
    """Validate ``error`` and return the history entry for attempt ``attempt``.

    ``type`` defaults to ``code`` and ``code`` to ``"handler_error"``. A backtrace may come
    as ``backtrace`` (a list of lines, or a string), ``stack_trace`` or
    ``details.traceback``. Extra keys (``timeout_kind``, ``limit_seconds``…) are kept.
    """
    if isinstance(error, str):
        error = {"message": error}
    if error is None:
        error = {}
    if not isinstance(error, dict):
        raise ValidationError("error must be an object", field="error")
    data: dict[str, Any] = validation.check_json(error, "error")
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
