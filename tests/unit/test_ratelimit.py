"""Rate-limit policies (OJS rate-limiting §6) and what a key may start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ojs import ratelimit
from django_ojs.exceptions import Unsupported, ValidationError

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_policy_normalises_and_defaults_the_key_to_the_queue():
    rule, wire = ratelimit.policy({"max_per_second": 2}, "email")
    assert rule.key == "queue:email" and rule.rate == ratelimit.Window(2, 1000)
    assert wire == {
        "key": "queue:email",
        "rate": {"limit": 2, "period": "PT1S"},
        "on_limit": "wait",
    }
    rule, wire = ratelimit.policy(
        {"key": "stripe", "concurrency": 5, "throttle": {"limit": 10, "period": "PT1S"}}, "q"
    )
    assert rule.concurrency == 5 and rule.throttle == ratelimit.Window(10, 1000)
    assert ratelimit.from_wire(wire) == rule


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"key": "bad key", "concurrency": 1}, "rate_limit.key"),
        ({"concurrency": -1}, "rate_limit.concurrency"),
        ({"concurrency": True}, "rate_limit.concurrency"),
        ({"rate": {"limit": 0, "period": "PT1S"}}, "rate_limit.rate.limit"),
        ({"rate": {"limit": 1, "period": "1s"}}, "rate_limit.rate.period"),
        ({"rate": {"limit": 1}}, "rate_limit.rate.period"),
        ({"throttle": {"limit": 1, "period": "PT0S"}}, "rate_limit.throttle.period"),
        ({"key": "k"}, "rate_limit"),
        ({"concurrency": 1, "on_limit": "sometimes"}, "rate_limit.on_limit"),
        ({"concurrency": 1, "extra": 1}, "rate_limit"),
        ({"max_per_second": 1, "rate": {"limit": 1, "period": "PT1S"}}, "rate_limit"),
        ("fast", "rate_limit"),
    ],
)
def test_invalid_policies_name_the_field(value, field):
    with pytest.raises(ValidationError) as info:
        ratelimit.policy(value, "q")
    assert info.value.field == field


def test_lossy_actions_are_refused_as_unsupported():
    with pytest.raises(Unsupported):
        ratelimit.policy({"concurrency": 1, "on_limit": "drop"}, "q")


def test_allowance_takes_the_strictest_limit():
    rule = ratelimit.RateLimit("k", concurrency=3, rate=ratelimit.Window(10, 60_000))
    assert ratelimit.allowance(rule, ratelimit.Usage(1, 0, None), NOW) == 2
    assert ratelimit.allowance(rule, ratelimit.Usage(0, 9, None), NOW) == 1
    assert ratelimit.allowance(rule, ratelimit.Usage(3, 0, None), NOW) == 0
    assert ratelimit.allowance(rule, ratelimit.Usage(5, 12, None), NOW) == 0


def test_throttle_spaces_starts_evenly():
    rule = ratelimit.RateLimit("k", throttle=ratelimit.Window(4, 1000))  # one per 250 ms
    just_now = ratelimit.Usage(0, 0, NOW - timedelta(milliseconds=100))
    a_while_ago = ratelimit.Usage(0, 0, NOW - timedelta(milliseconds=300))
    assert ratelimit.allowance(rule, just_now, NOW) == 0
    assert ratelimit.allowance(rule, a_while_ago, NOW) == 1
    assert ratelimit.reset_at(rule, just_now, None) == NOW + timedelta(milliseconds=150)
