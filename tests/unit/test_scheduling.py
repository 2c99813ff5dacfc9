"""The fair distribution rules of worker pools (``django_ojs.scheduling``), without a
database: what a pool's fetches would ask of which queue, dispatch by dispatch."""

from __future__ import annotations

from collections import Counter

import pytest

from django_ojs import scheduling
from django_ojs.exceptions import ValidationError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve(scheduler: scheduling.Scheduler, rounds: int, count: int = 1, *, empty=()):
    """Run ``rounds`` fetches of ``count`` against queues that always have jobs (except
    those in ``empty``); return the dispatches per queue."""
    total: Counter[str] = Counter()
    for _ in range(rounds):
        got: Counter[str] = Counter()
        found_empty = []
        left = count
        for queue, n in scheduler.plan(count):
            if queue in empty:
                found_empty.append(queue)
                continue
            got[queue] += n
            left -= n
        for queue in scheduler.fallback():
            if left <= 0:
                break
            if queue in empty or queue in found_empty:
                continue
            got[queue] += left
            left = 0
        scheduler.record(got, found_empty)
        total.update(got)
    return total


def test_weighted_three_to_one_exactly_in_every_window_of_four():
    s = scheduling.Scheduler(scheduling.policy(["a", "b"], strategy="weighted",
                                               weights={"a": 3, "b": 1}))  # fmt: skip
    order = []
    for _ in range(8):
        ((queue, _),) = s.plan(1)
        order.append(queue)
        s.record({queue: 1})
    assert order == ["a", "a", "b", "a", "a", "a", "b", "a"]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 10])
def test_weighted_ratio_holds_whatever_the_fetch_size(count):
    s = scheduling.Scheduler(scheduling.policy(["a", "b", "c"], strategy="weighted",
                                               weights={"a": 3, "b": 2, "c": 1}))  # fmt: skip
    got = serve(s, 60, count)
    total = 60 * count
    # Smooth weighted round-robin: off by at most one cycle's worth of a queue's weight.
    assert abs(got["a"] - total * 3 / 6) <= 3
    assert abs(got["b"] - total * 2 / 6) <= 3
    assert abs(got["c"] - total / 6) <= 3


def test_the_suites_queue_object_form_gives_the_same_weights():
    rules = scheduling.policy({"high": {"weight": 70}, "low": {"weight": 30}}, strategy="weighted")
    assert rules.queues == ("high", "low")
    assert rules.weights == {"high": 70, "low": 30}
    assert scheduling.policy({"high": 7, "low": None}).weights == {"high": 7}


def test_round_robin_alternates_and_skips_an_empty_queue():
    s = scheduling.Scheduler(scheduling.policy(["a", "b", "c"]))
    assert serve(s, 9) == {"a": 3, "b": 3, "c": 3}
    s = scheduling.Scheduler(scheduling.policy(["a", "b", "c"]))
    assert serve(s, 10, empty={"b"}) == {"a": 5, "c": 5}


def test_an_empty_queue_does_not_save_up_a_burst():
    s = scheduling.Scheduler(scheduling.policy(["a", "b"], strategy="weighted",
                                               weights={"a": 1, "b": 1}))  # fmt: skip
    serve(s, 50, empty={"b"})  # b idle for 50 dispatches
    # Back with jobs, b gets its share from now on, not 50 in a row.
    assert serve(s, 10) == {"a": 5, "b": 5}


def test_strict_takes_the_first_queue_with_jobs():
    s = scheduling.Scheduler(scheduling.policy(["a", "b"], strategy="strict"))
    assert s.plan(5) == [("a", 5)]
    assert serve(s, 10) == {"a": 10}
    assert serve(s, 10, empty={"a"}) == {"b": 10}


def test_least_loaded_takes_the_deepest_backlog():
    s = scheduling.Scheduler(scheduling.policy(["a", "b", "c"], strategy="least-loaded"))
    assert s.plan(3, {"a": 1, "b": 40, "c": 7}) == [("b", 3)]
    assert s.fallback({"a": 1, "b": 40, "c": 7}) == ["b", "c", "a"]


def test_starvation_prevention_gives_each_queue_its_minimum_share():
    clock = Clock()
    rules = scheduling.policy(
        ["critical", "analytics"], strategy="strict",
        starvation={"enabled": True, "rotation_interval": "PT1H", "min_dispatch_ratio": 0.1},
    )  # fmt: skip
    s = scheduling.Scheduler(rules, clock=clock)
    got = serve(s, 200)
    assert got["analytics"] >= 20  # 10 % of 200, although strict always prefers critical
    assert got["analytics"] <= 21
    # Without it, strict starves analytics completely.
    plain = scheduling.Scheduler(scheduling.policy(["critical", "analytics"], strategy="strict"))
    assert serve(plain, 200)["analytics"] == 0


def test_starvation_prevention_serves_a_queue_once_per_rotation_interval():
    clock = Clock()
    rules = scheduling.policy(
        ["critical", "low"], strategy="strict",
        starvation={"enabled": True, "rotation_interval": "PT30S", "min_dispatch_ratio": 0},
    )  # fmt: skip
    s = scheduling.Scheduler(rules, clock=clock)
    for _ in range(29):
        assert serve(s, 5) == {"critical": 5}
        clock.now += 1
    clock.now += 0.5
    assert s.plan(1) == [("critical", 1)]  # 29.5 s: not yet
    clock.now += 0.5
    assert s.plan(1) == [("low", 1)]  # 30 s without a dispatch: low's turn
    assert serve(s, 1) == {"low": 1}
    assert serve(s, 5) == {"critical": 5}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queues": "a"}, "queues"),
        ({"queues": []}, "queues"),
        ({"queues": ["a", "a"]}, "queues"),
        ({"queues": ["a"], "strategy": "fifo"}, "strategy"),
        ({"queues": ["a"], "weights": {"a": 0}}, "weights.a"),
        ({"queues": ["a"], "weights": {"a": True}}, "weights.a"),
        ({"queues": ["a"], "weights": {"b": 1}}, "weights.b"),
        ({"queues": {"a": {"weight": -1}}}, "queues.a.weight"),
        ({"queues": {"a": {"share": 1}}}, "queues.a"),
        ({"queues": ["a"], "starvation": {"rotation_interval": "soon"}},
         "starvation_prevention.rotation_interval"),
        ({"queues": ["a"], "starvation": {"min_dispatch_ratio": 1.5}},
         "starvation_prevention.min_dispatch_ratio"),
        ({"queues": ["a"], "starvation": {"enabled": "yes"}}, "starvation_prevention.enabled"),
        ({"queues": ["a"], "starvation": {"rotate": 1}}, "starvation_prevention"),
    ],
)  # fmt: skip
def test_bad_policies_are_refused_naming_the_field(kwargs, field):
    queues = kwargs.pop("queues")
    with pytest.raises(ValidationError) as info:
        scheduling.policy(queues, **kwargs)
    assert info.value.details["field"] == field


def test_starvation_wire_form():
    rules = scheduling.parse_starvation({"enabled": True, "rotation_interval": "PT1M"})
    assert rules.to_wire() == {"enabled": True, "rotation_interval": "PT60S",
                               "min_dispatch_ratio": 0.05}  # fmt: skip


def test_a_queue_served_by_rotation_is_reported_starved_once():
    clock = Clock()
    rules = scheduling.policy(
        ["critical", "low"], strategy="strict",
        starvation={"enabled": True, "rotation_interval": "PT30S", "min_dispatch_ratio": 0},
    )  # fmt: skip
    s = scheduling.Scheduler(rules, clock=clock)
    serve(s, 3)
    assert s.take_starved({"critical": 3}) == {}
    clock.now += 31
    assert s.plan(2) == [("low", 1), ("critical", 1)]
    assert s.take_starved({"low": 1, "critical": 1}) == {"low": 31}
    assert s.take_starved({"low": 1}) == {}
