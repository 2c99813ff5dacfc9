from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace

import pytest
from uuid6 import uuid7

from django_ojs import envelope
from django_ojs.exceptions import EnvelopeTooLarge, ValidationError
from django_ojs.retry import RetryPolicy
from django_ojs.unique import DEFAULT_STATES

MiB = 1024 * 1024
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def build(*args, **kwargs):
    return envelope.build(*args, max_bytes=MiB, now=NOW, **kwargs)


def wire(body):
    return envelope.from_wire(body, max_bytes=MiB, now=NOW)


def test_build__defaults():
    spec = build("email.send", ["a@b.c"])
    assert (spec.type, spec.args, spec.queue, spec.priority, spec.meta) == (
        "email.send", ["a@b.c"], "default", 0, {},
    )  # fmt: skip
    assert spec.id is None and spec.retry is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"type": ""}, "type"),
        ({"type": "1email"}, "type"),
        ({"type": "email..send"}, "type"),
        ({"type": "x" * 256}, "type"),
        ({"type": "a", "args": {"k": 1}}, "args"),
        ({"type": "a", "args": "abc"}, "args"),
        ({"type": "a", "queue": "Email"}, "queue"),
        ({"type": "a", "queue": "-x"}, "queue"),
        ({"type": "a", "queue": "q" * 129}, "queue"),
        ({"type": "a", "priority": 1.5}, "priority"),
        ({"type": "a", "priority": True}, "priority"),
        ({"type": "a", "priority": 10_000}, "priority"),
        ({"type": "a", "meta": []}, "meta"),
        ({"type": "a", "scheduled_at": datetime(2026, 1, 1)}, "scheduled_at"),
        ({"type": "a", "scheduled_at": "2026-01-01T00:00:00"}, "scheduled_at"),
        ({"type": "a", "expires_at": "tomorrow"}, "expires_at"),
        ({"type": "a", "timeout": 0}, "timeout"),
        ({"type": "a", "timeout": -5}, "timeout"),
        ({"type": "a", "grace_period": -1}, "grace_period"),
        ({"type": "a", "timeout": 60, "total_timeout": 30}, "total_timeout"),
        ({"type": "a", "id": str(uuid.uuid4())}, "id"),
        ({"type": "a", "id": str(uuid7()).upper()}, "id"),
        ({"type": "a", "id": "not-a-uuid"}, "id"),
        ({"type": "a", "tags": "x"}, "tags"),
        ({"type": "a", "pending": "yes"}, "pending"),
    ],
)
def test_build__invalid_options_name_the_field(kwargs, field):
    with pytest.raises(ValidationError) as info:
        build(**kwargs)
    assert info.value.field == field
    assert info.value.code == "invalid_payload"


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ([Decimal("1.5")], "args[0]"),
        ([{"when": datetime.now(UTC)}], "args[0].when"),
        ([{1: "int key"}], "args[0]"),
        ([float("nan")], "args[0]"),
        ([{1, 2}], "args[0]"),
        ([object()], "args[0]"),
    ],
)
def test_build__args_must_be_json_native(args, path):
    with pytest.raises(ValidationError) as info:
        build("a", args)
    assert info.value.field == path


def test_build__tuples_are_json_arrays():
    assert build("a", (1, (2, 3))).args == [1, [2, 3]]


def test_build__dashes_in_type_are_accepted():
    assert build("billing.invoice-generate").type == "billing.invoice-generate"


@pytest.mark.parametrize("bad", ["Billing.invoice", "email.Send", "1email.send", "email send"])
def test_build__type_segments_are_lower_case_and_start_with_a_letter(bad):
    # OJS core §5.1 and conformance L0-ENV-005.
    with pytest.raises(ValidationError) as info:
        build(bad)
    assert info.value.field == "type"


@pytest.mark.parametrize(
    ("priority", "ok"), [(100, True), (-100, True), (101, False), (-101, False)]
)
def test_build__priority_range_is_minus_100_to_100(priority, ok):
    # OJS core §5.2 and conformance L0-ENV-017.
    if ok:
        assert build("a", priority=priority).priority == priority
    else:
        with pytest.raises(ValidationError) as info:
            build("a", priority=priority)
        assert info.value.field == "priority"


def test_build__relative_and_absolute_times():
    spec = build("a", scheduled_at=timedelta(minutes=5), expires_at="2026-03-01T13:00:00+01:00")
    assert spec.scheduled_at == NOW + timedelta(minutes=5)
    assert spec.expires_at == NOW  # 13:00+01:00 is 12:00Z


def test_build__durations_in_seconds_or_timedelta():
    spec = build("a", timeout=1.5, visibility_timeout=timedelta(seconds=2), grace_period=0)
    assert (spec.timeout_ms, spec.visibility_timeout_ms, spec.grace_period_ms) == (1500, 2000, 0)


def test_build__retry_dict_merges_over_base():
    spec = build("a", retry={"max_attempts": 5}, retry_base=RetryPolicy(jitter=False))
    assert (spec.retry.max_attempts, spec.retry.jitter) == (5, False)


def test_build__uuid7_id_accepted():
    job_id = uuid7()
    assert build("a", id=str(job_id)).id == job_id


def test_build__envelope_size_limit():
    with pytest.raises(EnvelopeTooLarge) as info:
        envelope.build("a", ["x" * 2000], max_bytes=1000)
    assert info.value.http_status == 413


def test_from_wire__options_wrapper_and_aliases():
    spec = wire(
        {
            "type": "email.send",
            "args": [1],
            "meta": {"a": 1},
            "options": {
                "queue": "email",
                "priority": 3,
                "timeout_ms": 30000,
                "delay_until": "2026-03-01T12:05:00Z",
                "visibility_timeout_ms": 2000,
                "retry_policy": {"max_attempts": 2},
                "metadata": {"b": 2},
                "tags": ["x"],
            },
        }
    )
    assert (spec.queue, spec.priority, spec.timeout_ms, spec.visibility_timeout_ms) == (
        "email", 3, 30000, 2000,
    )  # fmt: skip
    assert spec.scheduled_at == NOW + timedelta(minutes=5)
    assert spec.retry.max_attempts == 2
    assert spec.meta == {"a": 1, "b": 2}
    assert spec.tags == ["x"]


def test_from_wire__top_level_options_and_seconds():
    spec = wire(
        {
            "type": "a",
            "args": [],
            "queue": "q1",
            "priority": -2,
            "scheduled_at": "+PT10S",
            "timeout": 5,
            "visibility_timeout": "PT3S",
            "total_timeout": 60,
            "enqueue_ttl": 30,
            "unique": {"key": ["type"]},
        }
    )
    assert (spec.queue, spec.priority, spec.timeout_ms, spec.visibility_timeout_ms) == (
        "q1", -2, 5000, 3000,
    )  # fmt: skip
    assert spec.scheduled_at == NOW + timedelta(seconds=10)
    assert (spec.total_timeout_ms, spec.enqueue_ttl_ms, spec.unique) == (
        60000,
        30000,
        # "key" is read as "keys"; the policy is stored normalised, defaults filled in.
        {"keys": ["type"], "states": list(DEFAULT_STATES), "on_conflict": "reject"},
    )


def test_from_wire__options_win_over_top_level():
    assert (
        wire({"type": "a", "args": [], "queue": "top", "options": {"queue": "inner"}}).queue
        == "inner"
    )


def test_from_wire__unknown_attributes_preserved_and_system_ones_ignored():
    spec = wire({"type": "a", "args": [], "x_custom": {"k": 1}, "state": "completed", "attempt": 9})
    assert spec.extra == {"x_custom": {"k": 1}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"args": []}, "type"),
        ({"type": "a"}, "args"),
        ({"type": "a", "args": {"x": 1}}, "args"),
        ({"type": "a", "args": [], "options": []}, "options"),
        ({"type": "a", "args": [], "options": {"timeout_ms": -1}}, "timeout_ms"),
        ({"type": "a", "args": [], "options": {"metadata": 1}}, "options.metadata"),
        ({"type": "a", "args": [], "options": {"pending": "true"}}, "pending"),
        ({"type": "a", "args": [], "options": {"retry": []}}, "retry"),
    ],
)
def test_from_wire__invalid_bodies(body, field):
    with pytest.raises(ValidationError) as info:
        wire(body)
    assert info.value.field == field


def test_from_wire__non_object_body():
    with pytest.raises(ValidationError):
        wire([1, 2])


def test_format_timestamp__utc_millis_z():
    ts = datetime(2026, 2, 12, 11, 30, 0, 123456, tzinfo=UTC) + timedelta(hours=0)
    assert envelope.format_timestamp(ts) == "2026-02-12T11:30:00.123Z"


def test_format_timestamp__one_text_per_instant_whatever_the_zone():
    ts = datetime(2026, 2, 12, 11, 30, 0, 123456, tzinfo=UTC)
    paris = ts.astimezone(timezone(timedelta(hours=1)))
    assert envelope.format_timestamp(ts) == envelope.format_timestamp(paris)
    assert envelope.format_timestamp(paris) == "2026-02-12T11:30:00.123Z"  # formatted again
    later = paris + timedelta(milliseconds=1)
    assert envelope.format_timestamp(later) == "2026-02-12T11:30:00.124Z"
    assert envelope.format_timestamp(datetime(5, 1, 2, tzinfo=UTC)) == "0005-01-02T00:00:00.000Z"


def _job(**overrides):
    base = {
        "id": uuid7(), "type": "a.b", "queue": "default", "args": [1], "meta": {}, "priority": 0, "state": "available",
        "attempt": 0, "max_attempts": 3, "created_at": NOW, "enqueued_at": NOW, "scheduled_at": None,
        "expires_at": None, "started_at": None, "completed_at": None, "cancelled_at": None, "discarded_at": None,
        "next_attempt_at": None, "timeout_ms": None, "visibility_timeout_ms": None, "total_timeout_ms": None,
        "enqueue_ttl_ms": None, "grace_period_ms": None, "heartbeat_timeout_ms": None, "retry": None,
        "unique": None, "schema": None, "tags": [], "error": None, "errors": [], "result": None, "worker_id": None,
        "visible_until": None, "extra": {}, "dead_letter": False,
    }  # fmt: skip
    base.update(overrides)
    return SimpleNamespace(**base)


def test_to_wire__required_fields_and_unknown_attributes():
    out = envelope.to_wire(_job(extra={"x_custom": 1}), default_retry=RetryPolicy())
    assert out["specversion"] == "1.0"
    assert out["x_custom"] == 1
    assert out["retry"]["max_attempts"] == 3
    assert out["created_at"] == "2026-03-01T12:00:00.000Z"
    assert "result" not in out and out["errors"] == []


def test_to_wire__completed_job_has_result_even_when_null():
    out = envelope.to_wire(_job(state="completed", completed_at=NOW))
    assert out["result"] is None and out["completed_at"]


def test_to_wire__timeouts_in_seconds_and_ms():
    out = envelope.to_wire(_job(timeout_ms=1500, total_timeout_ms=60000))
    assert (out["timeout"], out["timeout_ms"], out["total_timeout"]) == (1.5, 1500, 60)


@pytest.mark.parametrize("args", [[], [1, "two", {"three": [3.0, None, True]}], (1, 2)])
def test_build_plain__is_build_without_options(args):
    assert envelope.build_plain("a.b", args, max_bytes=1 << 20) == envelope.build(
        "a.b", args, max_bytes=1 << 20
    )


@pytest.mark.parametrize(
    ("type_", "args", "field"),
    [("a.b", "nope", "args"), ("Bad Type", [1], "type"), ("a.b", [float("nan")], "args[0]")],
)
def test_build_plain__refuses_what_build_refuses(type_, args, field):
    with pytest.raises(ValidationError) as plain:
        envelope.build_plain(type_, args, max_bytes=1 << 20)
    with pytest.raises(ValidationError) as full:
        envelope.build(type_, args, max_bytes=1 << 20)
    assert (plain.value.field, plain.value.message) == (full.value.field, full.value.message)
    assert plain.value.field == field


def test_build_plain__refuses_an_envelope_over_the_limit():
    with pytest.raises(EnvelopeTooLarge):
        envelope.build_plain("a.b", ["x" * 100], max_bytes=50)


def test_plain_fit__answers_for_every_job_at_once():
    specs = [envelope.unsized_plain("a.b", ["x" * 100]) for _ in range(3)]
    together = len(json.dumps([s.args for s in specs], separators=(",", ":")))
    # Within: all the jobs' arguments, the fixed part and the longest type fit.
    limit = together + envelope.parse._PLAIN_SIZE + envelope.TYPE_MAX_LENGTH
    assert envelope.plain_fit(specs, limit)
    # Not sure: each job is then checked on its own, and each fits here.
    assert not envelope.plain_fit(specs, limit - 1)
    for spec in specs:
        assert envelope.check_plain_size(spec, 200) is spec
    with pytest.raises(EnvelopeTooLarge):
        envelope.check_plain_size(specs[0], 100)


def test_validate_type__remembers_only_valid_types():
    assert envelope.validate_type("c.d") == "c.d"
    assert "c.d" in envelope.parse._VALID_TYPES
    for bad in ["C.D", "", 5, None]:
        with pytest.raises(ValidationError):
            envelope.validate_type(bad)
    assert "C.D" not in envelope.parse._VALID_TYPES
