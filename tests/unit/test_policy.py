from __future__ import annotations

from types import SimpleNamespace

import pytest

from django_ojs.policy import Durations, effective

DEFAULTS = Durations(
    visibility_ms=30_000, timeout_ms=60_000, grace_ms=5_000, heartbeat_timeout_ms=90_000
)


def job(**own: int) -> SimpleNamespace:
    fields = ("visibility_timeout_ms", "timeout_ms", "grace_period_ms", "heartbeat_timeout_ms")
    return SimpleNamespace(**{name: own.get(name) for name in fields})


def test_effective__a_job_without_its_own_timeouts_gets_the_defaults():
    assert effective(job(), defaults=DEFAULTS) == DEFAULTS


@pytest.mark.parametrize(
    ("own", "expected"),
    [
        ({"timeout_ms": 1_000}, Durations(30_000, 1_000, 5_000, 90_000)),
        ({"grace_period_ms": 0}, Durations(30_000, 60_000, 0, 90_000)),
        ({"heartbeat_timeout_ms": 7_000}, Durations(30_000, 60_000, 5_000, 7_000)),
        ({"visibility_timeout_ms": 2_000}, Durations(2_000, 60_000, 5_000, 90_000)),
    ],
)
def test_effective__each_timeout_of_the_job_wins_over_its_default(own, expected):
    assert effective(job(**own), defaults=DEFAULTS) == expected


def test_effective__a_fetchs_visibility_wins_over_the_jobs_and_the_default():
    assert effective(job(), visibility_ms=4_000, defaults=DEFAULTS).visibility_ms == 4_000
    assert effective(job(visibility_timeout_ms=2_000), visibility_ms=4_000, defaults=DEFAULTS) == (
        Durations(4_000, 60_000, 5_000, 90_000)
    )
