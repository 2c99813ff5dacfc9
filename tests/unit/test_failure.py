from __future__ import annotations

from datetime import UTC, datetime

import pytest

from django_ojs import failure
from django_ojs.exceptions import ValidationError

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_entry__http_binding_shape_gets_type_from_code():
    e = failure.entry(
        {"code": "handler_error", "message": "boom", "retryable": True,
         "details": {"traceback": "line 1\nline 2"}},
        attempt=2, now=NOW,
    )  # fmt: skip
    assert e["type"] == "handler_error" and e["code"] == "handler_error"
    assert e["backtrace"] == ["line 1", "line 2"]
    assert e["attempt"] == 2
    assert e["occurred_at"] == e["timestamp"] == "2026-03-01T12:00:00.000Z"


def test_entry__core_shape_and_defaults():
    e = failure.entry(
        {"type": "ValueError", "message": "bad", "backtrace": ["a"]}, attempt=1, now=NOW
    )
    assert (e["code"], e["type"], e["backtrace"]) == ("handler_error", "ValueError", ["a"])
    assert failure.entry("plain", attempt=1, now=NOW)["code"] == "handler_error"


def test_entry__keeps_extension_fields():
    e = failure.entry(
        {"type": "timeout", "timeout_kind": "execution", "limit_seconds": 5}, attempt=1, now=NOW
    )
    assert (e["timeout_kind"], e["limit_seconds"]) == ("execution", 5)


@pytest.mark.parametrize(
    ("error", "field"),
    [
        (42, "error"),
        ({"message": 3}, "error.message"),
        ({"code": 1}, "error.code"),
        ({"retryable": "no"}, "error.retryable"),
        ({"details": []}, "error.details"),
        ({"backtrace": [1, 2]}, "error.backtrace"),
    ],
)
def test_entry__invalid(error, field):
    with pytest.raises(ValidationError) as info:
        failure.entry(error, attempt=1, now=NOW)
    assert info.value.field == field


def test_entry__sanitize_replaces_unstorable_characters_instead_of_refusing():
    error = {"type": "ValueError", "message": "a\x00b", "backtrace": "x\ud800"}
    with pytest.raises(ValidationError):
        failure.entry(error, attempt=1, now=NOW)
    stored = failure.entry(error, attempt=1, now=NOW, sanitize=True)
    assert stored["message"] == "a\ufffdb" and stored["backtrace"] == ["x\ufffd"]
    assert stored["type"] == "ValueError"


def test_not_storable_errors():
    result = failure.result_not_storable("result must not contain the NUL character")
    assert result["type"] == result["code"] == "result_not_storable"
    assert result["retryable"] is False and "NUL" in result["message"]
    error = failure.error_not_storable("DataError: x")
    assert error["type"] == "error_not_storable" and "retryable" not in error
