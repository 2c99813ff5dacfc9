"""A tenant's limits, without a database (``django_ojs.tenantlimits``, multi-tenancy §8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ojs import tenantlimits
from django_ojs.exceptions import ValidationError
from django_ojs.tenantlimits import NONE, Limits, Usage

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_an_update_changes_the_fields_it_names_and_null_removes_one():
    first = tenantlimits.parse(
        {"max_concurrency": 20, "max_enqueue_rate": {"limit": 1000, "period": "PT1M"}}
    )
    assert first == Limits(max_concurrency=20, enqueue_rate=(1000, 60_000))
    second = tenantlimits.parse({"max_queue_depth": 50_000, "max_concurrency": None}, first)
    assert second == Limits(max_queue_depth=50_000, enqueue_rate=(1000, 60_000))
    assert tenantlimits.parse({}, second) == second
    assert tenantlimits.parse({"quota": "soft", "priority_boost": 5}).quota == "soft"


def test_the_wire_form_gives_every_field_and_parses_back():
    limits = Limits(max_concurrency=3, max_scheduled=10, enqueue_rate=(5, 1500), priority_boost=-2)
    wire = tenantlimits.wire(limits)
    assert wire == {
        "max_concurrency": 3,
        "max_enqueue_rate": {"limit": 5, "period": "PT1.500S"},
        "max_queue_depth": None,
        "max_scheduled": 10,
        "priority_boost": -2,
        "quota": "hard",
    }
    assert tenantlimits.parse(wire) == limits
    assert tenantlimits.wire(NONE)["max_enqueue_rate"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_concurrency": -1}, "max_concurrency"),
        ({"max_concurrency": 1.5}, "max_concurrency"),
        ({"max_concurrency": True}, "max_concurrency"),
        ({"max_concurrency": 2**31}, "max_concurrency"),
        ({"max_enqueue_rate": {"limit": 2**31, "period": "PT1S"}}, "max_enqueue_rate.limit"),
        ({"max_queue_depth": "10"}, "max_queue_depth"),
        ({"max_scheduled": 2**60}, "max_scheduled"),
        ({"max_enqueue_rate": 10}, "max_enqueue_rate"),
        ({"max_enqueue_rate": {"limit": 0, "period": "PT1S"}}, "max_enqueue_rate.limit"),
        ({"max_enqueue_rate": {"limit": 1, "period": "soon"}}, "max_enqueue_rate.period"),
        ({"max_enqueue_rate": {"limit": 1, "period": "PT0S"}}, "max_enqueue_rate.period"),
        ({"max_enqueue_rate": {"limit": 1, "every": "PT1S"}}, "max_enqueue_rate"),
        ({"priority_boost": 500}, "priority_boost"),
        ({"quota": "loose"}, "quota"),
        ({"max_workers": 3}, "max_workers"),
    ],
)
def test_a_malformed_limit_names_its_field(body, field):
    with pytest.raises(ValidationError) as caught:
        tenantlimits.parse(body)
    assert caught.value.details["field"] == field


def test_limits_must_be_an_object():
    with pytest.raises(ValidationError):
        tenantlimits.parse([1])


def test_the_first_limit_a_push_would_pass_is_the_error():
    limits = Limits(max_queue_depth=10, max_scheduled=2)
    assert tenantlimits.exceeded("a", limits, Usage(depth=9), NOW, adding=1, scheduled=0) is None
    error = tenantlimits.exceeded("a", limits, Usage(depth=9), NOW, adding=2, scheduled=0)
    assert error is not None
    assert (error.limit, error.current, error.maximum) == ("max_queue_depth", 9, 10)
    assert error.http_status == 429 and error.code == "tenant_limit_exceeded"
    assert error.details == {
        "tenant_id": "a",
        "limit": "max_queue_depth",
        "current": 9,
        "maximum": 10,
    }
    scheduled = tenantlimits.exceeded(
        "a", limits, Usage(depth=0, scheduled=2), NOW, adding=1, scheduled=1
    )
    assert scheduled is not None and scheduled.limit == "max_scheduled"
    # A push of jobs to run now does not count against max_scheduled.
    assert (
        tenantlimits.exceeded("a", limits, Usage(scheduled=2), NOW, adding=1, scheduled=0) is None
    )


def test_the_enqueue_rate_counts_in_a_window_that_restarts_after_its_period():
    limits = Limits(enqueue_rate=(3, 10_000))
    started = Usage(window_start=NOW, window_count=3)
    error = tenantlimits.exceeded(
        "a", limits, started, NOW + timedelta(seconds=4), adding=1, scheduled=0
    )
    assert error is not None and error.limit == "max_enqueue_rate"
    assert error.retry_after == 6  # the window ends 10 s after it began
    later = NOW + timedelta(seconds=10)
    assert tenantlimits.exceeded("a", limits, started, later, adding=3, scheduled=0) is None
    assert tenantlimits.window(limits, started, later) == (later, 0)
    assert tenantlimits.window(limits, started, NOW + timedelta(seconds=1)) == (NOW, 3)


def test_a_boost_keeps_the_priority_in_range():
    assert tenantlimits.boosted(5, Limits(priority_boost=10)) == 15
    assert tenantlimits.boosted(95, Limits(priority_boost=10)) == 100
    assert tenantlimits.boosted(-95, Limits(priority_boost=-10)) == -100
    assert tenantlimits.boosted(7, NONE) == 7


def test_what_a_push_has_to_do_follows_the_limits():
    assert NONE.empty and not NONE.on_enqueue and not NONE.counted
    assert Limits(max_concurrency=1).on_enqueue is False
    assert Limits(priority_boost=1).on_enqueue and not Limits(priority_boost=1).counted
    assert Limits(max_scheduled=1).counted


RULES = tenantlimits.throttling(True)


def test_throttling_is_off_unless_set_and_its_thresholds_are_checked():
    assert tenantlimits.throttling(None) is None and tenantlimits.throttling(False) is None
    assert RULES is not None and RULES.depth_ratio == 10 and RULES.active_share == 0.5
    assert tenantlimits.throttling({"every": 5}).every == 5
    for bad in ({"every": 0}, {"depth": 3}, {"weight_factor": 2}, {"min_depth": True}, "on"):
        with pytest.raises(ValidationError):
            tenantlimits.throttling(bad)


def test_a_tenant_ten_times_the_others_median_depth_is_noisy():
    assert RULES is not None
    depths = {"big": 50_000, "a": 100, "b": 300, "c": 2000}
    found = tenantlimits.noisy(depths, {}, 0, RULES)
    assert found == {"big": tenantlimits.Noisy("queue_depth_ratio_exceeded", weight=True)}
    # Against one other tenant: its median is that tenant.
    assert "big" in tenantlimits.noisy({"big": 20_000, "a": 10}, {}, 0, RULES)
    # Below min_depth, or alone, nobody is noisy.
    assert tenantlimits.noisy({"big": 900, "a": 1}, {}, 0, RULES) == {}
    assert tenantlimits.noisy({"big": 50_000}, {}, 0, RULES) == {}


def test_a_tenant_running_most_jobs_while_others_wait_is_held_to_its_share():
    assert RULES is not None
    found = tenantlimits.noisy({"a": 5, "big": 3}, {"big": 16, "a": 2}, 20, RULES)
    assert found == {"big": tenantlimits.Noisy("active_job_ratio_exceeded", concurrency=10)}
    # Nobody else waits: it uses spare capacity.
    assert tenantlimits.noisy({"big": 30}, {"big": 16}, 20, RULES) == {}
    # Too few jobs running to tell.
    assert tenantlimits.noisy({"a": 5}, {"big": 4}, 5, RULES) == {}
    both = tenantlimits.noisy({"big": 50_000, "a": 10}, {"big": 16}, 20, RULES)
    assert both["big"] == tenantlimits.Noisy("queue_depth_ratio_exceeded", 10, weight=True)
