"""Cron schedules (OJS cron §3-§5): syntax, special expressions, time zones and DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_ojs import schedule
from django_ojs.exceptions import ValidationError


def at(*parts):
    return datetime(*parts, tzinfo=UTC)


def test_five_fields_fire_at_second_zero():
    rule = schedule.parse("*/15 * * * *")
    assert rule.next_after(at(2026, 1, 1, 10, 7, 30)) == at(2026, 1, 1, 10, 15)


def test_six_fields_put_seconds_first():
    rule = schedule.parse("*/10 * * * * *")
    assert rule.next_after(at(2026, 1, 1, 10, 0, 1)) == at(2026, 1, 1, 10, 0, 10)


def test_names_of_months_and_days():
    rule = schedule.parse("0 9 * JAN MON")
    assert rule.next_after(at(2026, 1, 1)) == at(2026, 1, 5, 9)  # the first Monday


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@yearly", at(2027, 1, 1)),
        ("@annually", at(2027, 1, 1)),
        ("@monthly", at(2026, 2, 1)),
        ("@weekly", at(2026, 1, 4)),
        ("@daily", at(2026, 1, 2)),
        ("@midnight", at(2026, 1, 2)),
        ("@hourly", at(2026, 1, 1, 1)),
    ],
)
def test_special_expressions(alias, expected):
    assert schedule.parse(alias).next_after(at(2026, 1, 1, 0, 0, 1)) == expected


def test_every_counts_from_its_anchor():
    rule = schedule.parse("@every 1h30m")
    anchor = at(2026, 1, 1, 10)
    assert rule.next_after(at(2026, 1, 1, 9), anchor=anchor) == anchor
    assert rule.next_after(anchor, anchor=anchor) == at(2026, 1, 1, 11, 30)
    # after downtime, the next slot keeps the phase: 10:00 + 3 x 90 min
    assert rule.next_after(at(2026, 1, 1, 14, 1), anchor=anchor) == at(2026, 1, 1, 14, 30)
    assert schedule.parse("@every 500ms").every_ms == 500
    assert schedule.parse("@every PT2S").every_ms == 2000


def test_time_zone_moves_the_utc_instant():
    tokyo = schedule.parse("0 9 * * *", "Asia/Tokyo")
    assert tokyo.next_after(at(2025, 12, 31, 12)) == at(2026, 1, 1, 0)  # 09:00 JST = 00:00 UTC
    ny = schedule.parse("0 9 * * *", "America/New_York")
    assert ny.next_after(at(2026, 1, 1)) == at(2026, 1, 1, 14)  # EST = UTC-5
    assert ny.next_after(at(2026, 7, 1)) == at(2026, 7, 1, 13)  # EDT = UTC-4


def test_spring_forward_gap_does_not_fire():
    # 2026-03-08 02:30 does not exist in New York: the next 02:30 is on the 9th (EDT).
    rule = schedule.parse("30 2 * * *", "America/New_York")
    assert rule.next_after(at(2026, 3, 7, 12)) == at(2026, 3, 9, 6, 30)


def test_fall_back_repeated_time_fires_once_at_its_first_occurrence():
    rule = schedule.parse("30 1 * * *", "America/New_York")
    first = rule.next_after(at(2026, 10, 31, 12))
    assert first == at(2026, 11, 1, 5, 30)  # 01:30 EDT
    # not again at 01:30 EST (06:30 UTC) the same night
    assert rule.next_after(first) == at(2026, 11, 2, 6, 30)


def test_hourly_in_the_repeated_hour_fires_once():
    rule = schedule.parse("15 * * * *", "America/New_York")
    t, fires = at(2026, 11, 1, 4), []
    while t < at(2026, 11, 1, 8):
        t = rule.next_after(t)
        fires.append(t)
    local = [f.astimezone(schedule.ZoneInfo("America/New_York")).strftime("%H:%M") for f in fires]
    assert local.count("01:15") == 1 and "02:15" in local


@pytest.mark.parametrize(
    "expression",
    ["not a valid cron", "0 0 0 0 0 0 0", "99 25 32 13 8", "* * * *", "@sometimes", "@every",
     "@every 5 minutes", "0 0 31 2 *", "", None, 5],
)  # fmt: skip
def test_invalid_expressions_are_refused(expression):
    with pytest.raises(ValidationError) as info:
        schedule.parse(expression)
    assert info.value.field == "expression"


def test_invalid_time_zone_and_name():
    with pytest.raises(ValidationError) as info:
        schedule.parse("* * * * *", "Mars/Olympus")
    assert info.value.field == "timezone"
    for bad in ("Nightly", "-x", "a b", "", "x" * 256):
        with pytest.raises(ValidationError):
            schedule.name(bad)
    assert schedule.name("nightly-report.v2") == "nightly-report.v2"


def test_every_interval_accepts_fractions():
    assert schedule.parse("@every 1.5s").next_after(at(2026, 1, 1), anchor=at(2026, 1, 1)) == at(
        2026, 1, 1
    ) + timedelta(milliseconds=1500)
