from __future__ import annotations

from datetime import timedelta

import pytest

from django_ojs.exceptions import RetryPolicyError
from django_ojs.retry import (
    RetryPolicy,
    decide,
    format_duration,
    format_duration_days,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1S", 1000),
        ("PT0.5S", 500),
        ("PT5M", 300_000),
        ("PT1H30M", 5_400_000),
        ("P1D", 86_400_000),
        ("P1DT2H", 93_600_000),
        ("PT1M30.25S", 90_250),
    ],
)
def test_parse_duration__iso_8601(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["1s", "300s", "PT", "P", "T1S", "PT-1S", "", "PT1.S", "1000"])
def test_parse_duration__rejects_non_iso(text):
    with pytest.raises(RetryPolicyError):
        parse_duration(text)


@pytest.mark.parametrize("ms", [1000, 500, 300_000, 5_400_000, 90_250, 1])
def test_format_duration__round_trips(ms):
    assert parse_duration(format_duration(ms)) == ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "PT0S"), (7 * 86_400_000, "P7D"), (129_600_000, "P1DT12H"), (3_600_000, "PT1H"),
     (500, "PT0.5S"), (86_401_500, "P1DT1.5S"), (180 * 86_400_000, "P180D")],
)  # fmt: skip
def test_format_duration_days__counts_whole_days_and_round_trips(ms, text):
    assert format_duration_days(ms) == text
    assert parse_duration(text) == ms


def test_policy__defaults_follow_retry_spec():
    p = RetryPolicy()
    assert p.to_wire() == {
        "max_attempts": 3,
        "initial_interval": "PT1S",
        "backoff_coefficient": 2.0,
        "max_interval": "PT5M",
        "jitter": True,
        "non_retryable_errors": [],
        "on_exhaustion": "discard",
        "backoff_strategy": "exponential",
    }


def test_policy__partial_policy_merges_over_base():
    base = RetryPolicy(max_attempts=7, jitter=False)
    p = RetryPolicy.from_wire({"initial_interval": "PT2S"}, base=base)
    assert (p.max_attempts, p.jitter, p.initial_interval_ms) == (7, False, 2000)


def test_policy__ms_fields_and_backoff_type_alias():
    p = RetryPolicy.from_wire(
        {"initial_interval_ms": 250, "initial_interval": "PT9S", "backoff_type": "linear"}
    )
    assert p.initial_interval_ms == 250  # the _ms form wins (digest §8.4)
    assert p.backoff_strategy == "linear"


def test_policy__timedelta_intervals_for_python_callers():
    assert RetryPolicy.from_wire({"max_interval": timedelta(minutes=1)}).max_interval_ms == 60_000


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        ({"max_attempts": -1}, "retry.max_attempts"),
        ({"max_attempts": "3"}, "retry.max_attempts"),
        ({"max_attempts": True}, "retry.max_attempts"),
        ({"backoff_coefficient": 0.5}, "retry.backoff_coefficient"),
        ({"initial_interval": "1s"}, "retry.initial_interval"),
        ({"initial_interval": "PT0S"}, "retry.initial_interval"),
        ({"initial_interval": "PT10M", "max_interval": "PT1M"}, "retry.max_interval"),
        ({"jitter": "yes"}, "retry.jitter"),
        ({"non_retryable_errors": "auth.*"}, "retry.non_retryable_errors"),
        ({"on_exhaustion": "explode"}, "retry.on_exhaustion"),
        ({"backoff_strategy": "fibonacci"}, "retry.backoff_strategy"),
    ],
)
def test_policy__invalid_values_name_the_field(policy, field):
    with pytest.raises(RetryPolicyError) as info:
        RetryPolicy.from_wire(policy)
    assert info.value.field == field
    assert info.value.http_status == 422


def test_backoff__exponential_without_jitter_is_exact():
    p = RetryPolicy(jitter=False, initial_interval_ms=1000, backoff_coefficient=2.0)
    assert [p.backoff_ms(n) for n in range(1, 7)] == [1000, 2000, 4000, 8000, 16000, 32000]


def test_backoff__capped_by_max_interval():
    p = RetryPolicy(jitter=False, max_interval_ms=5000)
    assert p.backoff_ms(10) == 5000


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("linear", [1000, 2000, 3000]),
        ("polynomial", [1000, 4000, 9000]),
        ("constant", [1000, 1000, 1000]),
        ("none", [1000, 1000, 1000]),
    ],
)
def test_backoff__other_strategies(strategy, expected):
    p = RetryPolicy(jitter=False, backoff_strategy=strategy)
    assert [p.backoff_ms(n) for n in (1, 2, 3)] == expected


def test_backoff__jitter_spans_half_to_one_and_a_half_and_is_capped_again():
    p = RetryPolicy(jitter=True, initial_interval_ms=1000, max_interval_ms=1200)
    assert p.backoff_ms(1, rand=0.0) == 500
    assert p.backoff_ms(1, rand=0.5) == 1000
    assert p.backoff_ms(1, rand=0.999) == 1200  # RET-06: jitter cannot exceed max_interval


def test_non_retryable__exact_and_prefix_match():
    p = RetryPolicy(non_retryable_errors=("ValueError", "auth.*"))
    assert p.is_non_retryable("ValueError")
    assert p.is_non_retryable("auth.token_expired")
    assert not p.is_non_retryable("auth")  # the prefix includes the dot
    assert not p.is_non_retryable("network.timeout")
    assert p.is_non_retryable(None, "auth.expired")  # code is the fallback


def test_decide__retries_until_max_attempts_then_discards():
    p = RetryPolicy(max_attempts=3, jitter=False)
    assert decide(p, 1, error_type="x").state == "retryable"
    assert decide(p, 2, error_type="x").delay_ms == 2000
    final = decide(p, 3, error_type="x")
    assert (final.state, final.reason) == ("discarded", "exhausted")


@pytest.mark.parametrize("max_attempts", [0, 1])
def test_decide__zero_or_one_attempt_means_run_once(max_attempts):
    assert decide(RetryPolicy(max_attempts=max_attempts), 1, error_type="x").state == "discarded"


def test_decide__non_retryable_paths_and_dead_letter():
    p = RetryPolicy(non_retryable_errors=("fatal.*",), on_exhaustion="dead_letter")
    assert decide(p, 1, error_type="x", retryable=False) == decide(p, 1, error_type="fatal.db")
    assert decide(p, 1, error_type="fatal.db").dead_letter is True


@pytest.mark.parametrize(
    ("code", "state", "dead_letter"),
    [
        ("DISCARD", "discarded", False),
        ("FAIL", "discarded", False),
        ("DEAD_LETTER", "discarded", True),
    ],
)
def test_decide__handler_directives_override_policy(code, state, dead_letter):
    d = decide(RetryPolicy(max_attempts=10), 1, error_type=None, error_code=code)
    assert (d.state, d.dead_letter) == (state, dead_letter)
