"""The input rules of ``django_ojs.validation``: one function per input, no database."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import pytest

from django_ojs import envelope, validation
from django_ojs.envelope import build
from django_ojs.exceptions import EnvelopeTooLarge, NotStorable, ValidationError
from django_ojs.retry import parse_duration


def refused(call, *args, **kwargs) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        call(*args, **kwargs)
    assert info.value.code == "invalid_payload"
    return info.value


# ------------------------------------------------------------------------------ queues


@pytest.mark.parametrize("name", ["default", "a", "0", "mail.high", "mail-low", "a" * 128])
def test_validate_queue__accepts(name):
    assert validation.validate_queue(name) == name


def test_validate_queue__none_is_the_default_queue():
    assert validation.validate_queue(None) == "default"


@pytest.mark.parametrize(
    "name",
    ["", "Mail", "-a", ".a", "a b", "a_b", "a" * 129, 5, "default\n", "default\r\n", "\ndefault"],
)
def test_validate_queue__refuses(name):
    error = refused(validation.validate_queue, name)
    assert error.field == "queue"


def test_validate_queues__keeps_order_and_accepts_tuples():
    assert validation.validate_queues(("b", "a")) == ["b", "a"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("default", "queues must be an array of queue names"),
        (None, "queues must be an array of queue names"),
        ([], "queues must name at least one queue"),
        (["ok", ""], "queues[1] must be a non-empty string"),
        (["ok", None], "queues[1] must be a non-empty string"),
        (["Bad"], "queues[0] must match [a-z0-9][a-z0-9-.]* and be at most 128 characters"),
        (["ok\n"], "queues[0] must match [a-z0-9][a-z0-9-.]* and be at most 128 characters"),
    ],
)
def test_validate_queues__refuses(value, message):
    error = refused(validation.validate_queues, value)
    assert (error.field, error.message) == ("queues", message)


def test_validate_queues__allow_empty():
    assert validation.validate_queues([], allow_empty=True) == []


# ------------------------------------------------------------------------------ fetch count


@pytest.mark.parametrize("count", [1, 10, validation.MAX_FETCH_COUNT])
def test_validate_fetch_count__accepts(count):
    assert validation.validate_fetch_count(count) == count


@pytest.mark.parametrize("count", [0, -1, validation.MAX_FETCH_COUNT + 1, True, 1.0, "1", None])
def test_validate_fetch_count__refuses(count):
    error = refused(validation.validate_fetch_count, count)
    assert error.field == "count"
    assert error.message == "count must be an integer from 1 to 1000"


# ------------------------------------------------------------------------------ workers


def test_validate_worker_id():
    assert validation.validate_worker_id("w-1") == "w-1"
    assert validation.validate_worker_id(None) is None
    assert refused(validation.validate_worker_id, None, required=True).message == (
        "worker_id is required"
    )
    for bad in ("", 5, ["w"]):
        assert refused(validation.validate_worker_id, bad).message == (
            "worker_id must be a non-empty string"
        )
    error = refused(validation.validate_worker_id, "w" * 256)
    assert (error.field, error.message) == ("worker_id", "worker_id must be at most 255 characters")


@pytest.mark.parametrize("state", [None, "running", "quiet", "terminate"])
def test_validate_worker_state__accepts(state):
    assert validation.validate_worker_state(state) == state


@pytest.mark.parametrize("state", ["sleeping", "", "quiet\n", 1])
def test_validate_worker_state__refuses(state):
    error = refused(validation.validate_worker_state, state)
    assert (error.field, error.message) == ("state", "state must be running, quiet or terminate")


def test_validate_non_negative_and_strings():
    assert validation.validate_non_negative(0, "pid") == 0
    assert validation.validate_non_negative(None, "pid") is None
    for bad in (-1, True, 1.5, "3"):
        assert refused(validation.validate_non_negative, bad, "pid").field == "pid"
    assert validation.validate_strings(("a",), "labels") == ["a"]
    for bad in ("a", [""], [1], {"a": 1}):
        assert refused(validation.validate_strings, bad, "labels").field == "labels"


# ------------------------------------------------------------------------------ progress


@pytest.mark.parametrize(
    ("value", "scale", "expected"),
    [(0, 1.0, 0.0), (0.5, 1.0, 0.5), (1, 1.0, 1.0), (1.7, 1.0, 1.0), (-3, 1.0, 0.0),
     (40, 100.0, 0.4), (250, 100.0, 1.0)],
)  # fmt: skip
def test_validate_progress__clamps(value, scale, expected):
    assert validation.validate_progress(value, scale=scale).value == expected


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"value": "half"}, "progress", "progress must be a number from 0 to 1"),
        ({"value": None}, "progress", "progress must be a number from 0 to 1"),
        ({"value": True}, "progress", "progress must be a number from 0 to 1"),
        ({"value": float("nan")}, "progress", "progress must be a number from 0 to 1"),
        (
            {"value": None, "field": "percentage", "scale": 100.0},
            "percentage",
            "percentage must be a number from 0 to 100",
        ),
        ({"value": 0.5, "message": 3}, "message", "message must be a string"),
        ({"value": 0.5, "data": []}, "data", "data must be an object"),
        ({"value": 0.5, "data": {"x": object()}}, "data.x", None),
    ],
)
def test_validate_progress__refuses(kwargs, field, message):
    error = refused(validation.validate_progress, **kwargs)
    assert error.field == field
    if message:
        assert error.message == message


def test_validate_progress__keeps_message_and_data():
    assert validation.validate_progress(0.5, "half", {"n": (1, 2)}) == (0.5, "half", {"n": [1, 2]})


# ------------------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("value", "expected"),
    [(30, 30_000), (0.25, 250), (timedelta(minutes=1), 60_000), ("PT1.5S", 1500), (None, None)],
)
def test_duration_ms__seconds(value, expected):
    assert validation.duration_ms(value, "visibility_timeout") == expected


@pytest.mark.parametrize(
    "value",
    [0, -1, True, "soon", "PT0S", "PT1S\n", float("inf"), float("nan"), 1e308, timedelta(0), []],
)
def test_duration_ms__refuses(value):
    error = refused(validation.duration_ms, value, "visibility_timeout")
    assert error.field == "visibility_timeout"


def test_duration_ms__message_names_the_unit():
    assert refused(validation.duration_ms, -1, "timeout").message == (
        "timeout must be a positive number of seconds"
    )
    assert refused(validation.duration_ms, -1, "timeout_ms", unit="ms").message == (
        "timeout_ms must be a positive number of milliseconds"
    )
    assert refused(validation.duration_ms, -1, "grace_period", allow_zero=True).message == (
        "grace_period must be a non-negative number of seconds"
    )
    assert validation.duration_ms(0, "grace_period", allow_zero=True) == 0


def test_duration_ms__milliseconds_are_not_strings():
    assert validation.duration_ms(1500, "timeout_ms", unit="ms") == 1500
    assert refused(validation.duration_ms, "PT1S", "timeout_ms", unit="ms").field == "timeout_ms"


def test_first_duration_ms__ms_wins_and_sources_are_tried_in_order():
    options, body = {"timeout": 5}, {"timeout_ms": 700, "timeout": 9}
    assert validation.first_duration_ms([options, body], "timeout") == 700
    assert validation.first_duration_ms([options, {"timeout": 9}], "timeout") == 5000
    assert validation.first_duration_ms([{}, {}], "timeout") is None
    assert refused(validation.first_duration_ms, [{"timeout_ms": 0}], "timeout").field == (
        "timeout_ms"
    )


# ------------------------------------------------------------------------------ patterns


@pytest.mark.parametrize("bad", ["email.send\n", "email.send\r\n", "\nemail.send"])
def test_type_pattern__trailing_newline_is_refused(bad):
    assert refused(build, bad, max_bytes=10_000).field == "type"


def test_queue_pattern__trailing_newline_is_refused_by_the_envelope():
    assert refused(build, "a", queue="default\n", max_bytes=10_000).field == "queue"


def test_iso_duration__trailing_newline_is_refused():
    with pytest.raises(ValidationError):
        parse_duration("PT1S\n")


def test_type_allowed__exact_types_prefix_patterns_and_star():
    from django_ojs.validation import type_allowed

    patterns = ["email.send", "billing.*"]
    assert type_allowed("email.send", patterns)
    assert type_allowed("billing.invoice", patterns)
    assert type_allowed("billing.invoice.pdf", patterns)
    assert not type_allowed("billing", patterns)
    assert not type_allowed("email.sender", patterns)
    assert not type_allowed("email", patterns)
    assert type_allowed("anything", ["*"])
    assert not type_allowed("anything", [])


def test_storable_text__replaces_nul_and_lone_surrogates_everywhere():
    value = ("a\x00", {"k\ud800": ["\udfff", 1, None, {"x": "\U0001f600"}]})
    assert validation.storable_text(value) == [
        "a\ufffd",
        {"k\ufffd": ["\ufffd", 1, None, {"x": "\U0001f600"}]},
    ]
    assert validation.storable_text("\x00") == "\ufffd" and validation.storable_text(5) == 5
    assert validation.check_json(validation.storable_text(value), "v")  # now storable


def test_check_text__an_unstorable_string_is_a_not_storable_validation_error():
    with pytest.raises(NotStorable) as caught:
        validation.check_json({"a": ["\x00"]}, "result")
    assert isinstance(caught.value, ValidationError) and caught.value.field == "result.a[0]"


@pytest.mark.parametrize("empty", [{}, [], ()])
def test_check_json__an_empty_container_comes_back_as_a_new_one(empty):
    checked = validation.check_json(empty, "extra")
    assert checked == ({} if isinstance(empty, dict) else [])
    assert checked is not empty
    checked.append(1) if isinstance(checked, list) else checked.update(k=1)
    assert not empty  # the caller's value is left alone


@pytest.mark.parametrize(
    "value",
    [[1, "a", None, True, False], ("t", 2), [10**4299], ["é€😀"], [1.5, "x"], [{"k": 1}, 2]],
)
def test_check_json__a_flat_array_comes_back_as_a_new_list_equal_to_it(value):
    checked = validation.check_json(value, "args")
    assert checked == list(value) and checked is not value and type(checked) is list


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ([1, "a\x00b"], "args[1]", "NUL"),
        (["\ud800"], "args[0]", "surrogate"),
        ([1, 10**14_000], "args[1]", "digits"),
        ([float("nan")], "args[0]", "NaN"),
        ([b"bytes"], "args[0]", "JSON-native"),
    ],
)
def test_check_json__a_flat_array_is_refused_where_the_full_walk_refuses_it(value, field, message):
    with pytest.raises(ValidationError, match=message) as caught:
        validation.check_json(value, "args")
    assert caught.value.field == field


def test_check_json__max_depth_zero_refuses_even_a_flat_array():
    with pytest.raises(ValidationError, match="nested"):
        validation.check_json([1], "args", max_depth=0)


@pytest.mark.parametrize("make", [build, envelope.build_plain], ids=["build", "build_plain"])
def test_build__the_size_limit_counts_the_compact_json_of_args_meta_extra_and_unique(make):
    exact = len('[["xx"],{},{},null]') + len("t.size")
    assert make("t.size", ["xx"], max_bytes=exact).args == ["xx"]
    with pytest.raises(EnvelopeTooLarge) as info:
        make("t.size", ("xx",), max_bytes=exact - 1)
    assert info.value.details == {"size": exact, "limit": exact - 1}


# ------------------------------------------------------- the request body's depth, on bytes


def _random_json(rng: random.Random, depth: int) -> Any:
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([1, 'a[{"', None, "\\", "", 'é]}\n"', "\u2028[", 1.5e300, True])
    if rng.random() < 0.5:
        return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {f'k[{"}"}"{i}': _random_json(rng, depth - 1) for i in range(rng.randint(0, 3))}


def test_json_text_depth_agrees_with_the_walk_of_the_decoded_value():
    rng = random.Random(20261127)
    for _ in range(3000):
        value = _random_json(rng, rng.randint(0, 9))
        raw = json.dumps(
            value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1])
        ).encode()
        for limit in range(10):
            assert validation.json_text_depth_exceeds(raw, limit) is validation.json_depth_exceeds(
                value, limit
            ), (raw, limit)


@pytest.mark.parametrize(
    ("raw", "deepest"),
    [
        (b"1", 0),
        (b"[]", 1),
        (b'{"a": [1, {"b": "]]]]"}]}', 3),
        (b'["\\"[[[", "\\\\", {"\\u005b": []}]', 3),  # escapes, escaped quotes, \\u
        ('{"é": ["ü", ["日本"]]}'.encode(), 3),
    ],
)
def test_json_text_depth_cases(raw, deepest):
    assert validation.json_text_depth_exceeds(raw, deepest) is False
    if deepest:
        assert validation.json_text_depth_exceeds(raw, deepest - 1) is True


def test_json_text_depth_of_a_very_deep_document():
    raw = b"[" * 200_000 + b"]" * 200_000
    assert validation.json_text_depth_exceeds(raw, 64) is True
    assert validation.json_text_depth_exceeds(b'{"jobs": [' + b"[]," * 1000 + b"[]]}", 3) is False
