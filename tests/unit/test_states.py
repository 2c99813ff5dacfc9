from __future__ import annotations

import pytest

from django_ojs import states
from django_ojs.states import JobState


def test_states__exactly_the_eight_ojs_states():
    assert {s.value for s in JobState} == {
        "scheduled", "available", "pending", "active",
        "completed", "retryable", "cancelled", "discarded",
    }  # fmt: skip


def test_terminal_states__have_no_way_out_but_manual_dead_letter_retry():
    assert {"completed", "cancelled", "discarded"} == states.TERMINAL_STATES
    assert states.TRANSITIONS["completed"] == frozenset()
    assert states.TRANSITIONS["cancelled"] == frozenset()
    assert states.TRANSITIONS["discarded"] == {"available"}


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("available", "completed"),
        ("discarded", "active"),
        ("scheduled", "active"),
        ("retryable", "active"),
        ("cancelled", "available"),
        ("completed", "available"),
    ],
)
def test_can_transition__core_6_4_invalid_examples_are_rejected(src, dst):
    assert not states.can_transition(src, dst)


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("scheduled", "available"),
        ("available", "active"),
        ("pending", "available"),
        ("active", "completed"),
        ("active", "retryable"),
        ("active", "discarded"),
        ("active", "cancelled"),
        ("active", "available"),
        ("retryable", "available"),
        ("retryable", "discarded"),
        ("discarded", "available"),
    ],
)
def test_can_transition__core_6_3_and_conformance_transitions_are_allowed(src, dst):
    assert states.can_transition(src, dst)


def test_operations__every_start_state_has_a_transition_to_somewhere():
    for operation, allowed in states.OPERATIONS.items():
        for state in allowed:
            assert states.TRANSITIONS[state], (operation, state)


def test_operations__terminal_states_only_accept_dead_letter_retry():
    for operation, allowed in states.OPERATIONS.items():
        for state in states.TERMINAL_STATES & allowed:
            assert (operation, state) == ("retry_discarded", "discarded")
