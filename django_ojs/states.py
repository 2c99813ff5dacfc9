"""The OJS job states and the closed transition table (OJS core §6).

Pure: no database access. ``lifecycle`` consults this table before every write, and the
exhaustive transition test iterates over it. It must not import Django's DB layer.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    """The eight OJS lifecycle states (OJS core §6.1)."""

    SCHEDULED = "scheduled"
    AVAILABLE = "available"
    PENDING = "pending"
    ACTIVE = "active"
    COMPLETED = "completed"
    RETRYABLE = "retryable"
    CANCELLED = "cancelled"
    DISCARDED = "discarded"


S = JobState

TERMINAL_STATES: frozenset[str] = frozenset({S.COMPLETED, S.CANCELLED, S.DISCARDED})
NON_TERMINAL_STATES: frozenset[str] = frozenset(s for s in S if s not in TERMINAL_STATES)
#: ``(value, label)`` pairs for model fields and admin filters.
CHOICES: list[tuple[str, str]] = [(s.value, s.value) for s in S]
#: States a job waits in before an attempt starts (expiry and enqueue TTL apply here).
WAITING_STATES: frozenset[str] = frozenset({S.SCHEDULED, S.AVAILABLE, S.PENDING, S.RETRYABLE})

# The union of OJS core §6.3, conformance L0-LC-002 and the timeouts/expiry transitions
# (digest §8.3): a single whitelist. ``discarded → available`` is the manual dead-letter
# retry; ``cancelled`` stays terminal (digest §8.23). ``pending → scheduled`` is an
# activation whose ``scheduled_at`` is still in the future (digest §8.34).
TRANSITIONS: dict[str, frozenset[str]] = {
    S.SCHEDULED: frozenset({S.AVAILABLE, S.CANCELLED, S.DISCARDED}),
    S.AVAILABLE: frozenset({S.ACTIVE, S.CANCELLED, S.DISCARDED}),
    S.PENDING: frozenset({S.AVAILABLE, S.SCHEDULED, S.CANCELLED, S.DISCARDED}),
    S.ACTIVE: frozenset({S.COMPLETED, S.RETRYABLE, S.DISCARDED, S.CANCELLED, S.AVAILABLE}),
    S.RETRYABLE: frozenset({S.AVAILABLE, S.CANCELLED, S.DISCARDED}),
    S.COMPLETED: frozenset(),
    S.CANCELLED: frozenset(),
    S.DISCARDED: frozenset({S.AVAILABLE}),
}

# Which states each lifecycle operation may start from. The exhaustive test checks every
# (state, operation) pair against this table; ``lifecycle`` enforces it with compare-and-set
# updates. ``cancel`` on an already-cancelled job is idempotent (OJS core §7.6.4) and is not
# a transition, so it is listed separately.
OPERATIONS: dict[str, frozenset[str]] = {
    "fetch": frozenset({S.AVAILABLE}),
    "ack": frozenset({S.ACTIVE}),
    "fail": frozenset({S.ACTIVE}),
    "cancel": frozenset({S.SCHEDULED, S.AVAILABLE, S.PENDING, S.ACTIVE, S.RETRYABLE}),
    "activate": frozenset({S.PENDING}),
    "retry_discarded": frozenset({S.DISCARDED}),
    "promote": frozenset({S.SCHEDULED, S.RETRYABLE}),
    "expire": frozenset(WAITING_STATES),
    "rescue": frozenset({S.ACTIVE}),
    # Operator actions (admin): end a job now, or make a waiting job available now.
    "discard": frozenset({S.SCHEDULED, S.AVAILABLE, S.PENDING, S.ACTIVE, S.RETRYABLE}),
    "run_now": frozenset({S.SCHEDULED, S.RETRYABLE}),
}
IDEMPOTENT: dict[str, frozenset[str]] = {"cancel": frozenset({S.CANCELLED})}


def is_terminal(state: str) -> bool:
    """True for ``completed``, ``cancelled`` and ``discarded``."""
    return state in TERMINAL_STATES


def can_transition(from_state: str, to_state: str) -> bool:
    """True when OJS allows ``from_state → to_state``."""
    return to_state in TRANSITIONS.get(from_state, frozenset())


def allowed_from(operation: str) -> frozenset[str]:
    """The states ``operation`` may be applied to."""
    return OPERATIONS[operation]


#: Job fields that only mean something while an attempt runs (its deadlines); every
#: transition out of ``active`` clears them.
RELEASED_FIELDS = ("visible_until", "timeout_at", "stalled_at")
