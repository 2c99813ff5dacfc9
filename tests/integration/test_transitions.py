"""The full (state, operation) table: allowed pairs succeed, every other pair is refused.

Rows are built in each state by the factory; each operation is the real lifecycle call.
Targeted operations must raise ``InvalidTransition`` (OJS core §6.3); the claim and the
time-driven sweeps select by state, so for them "refused" means "the row is untouched".
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ojs import lifecycle, states
from django_ojs.exceptions import InvalidTransition
from django_ojs.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

TRAITS = {
    "scheduled": {"scheduled": True},
    "available": {},
    "pending": {"pending": True},
    "active": {"active": True},
    "completed": {"completed": True},
    "retryable": {"retryable": True},
    "cancelled": {"cancelled": True},
    "discarded": {"discarded": True},
}
TARGETED = {
    "ack": lambda job: lifecycle.ack(job.id),
    "fail": lambda job: lifecycle.fail(job.id, "boom"),
    "cancel": lambda job: lifecycle.cancel(job.id),
    "activate": lambda job: lifecycle.activate(job.id),
    "retry_discarded": lambda job: lifecycle.retry_discarded(job.id),
    "discard": lambda job: lifecycle.discard(job.id),
    "run_now": lambda job: lifecycle.run_now(job.id),
}
FAR_FUTURE = timezone.now() + timedelta(days=3650)
SELECTING = {
    "fetch": lambda job: lifecycle.fetch([job.queue], count=10),
    "promote": lambda job: lifecycle.promote_due(now=FAR_FUTURE),
    "expire": lambda job: lifecycle.expire_stale(now=FAR_FUTURE),
    "rescue": lambda job: lifecycle.rescue_expired(now=FAR_FUTURE),
}
assert set(TARGETED) | set(SELECTING) == set(states.OPERATIONS)


def make(state: str, operation: str) -> Job:
    if operation == "fetch":
        # Rows that are not due: fetch promotes a due scheduled or retryable job before it
        # claims (tests/integration/test_api_lifecycle.py), and never claims expired ones.
        return JobFactory(queue=f"q-{state}", **TRAITS[state])
    past = timezone.now() - timedelta(seconds=1)
    # Make every row "due" for the sweeps, so only its state decides what they do.
    return JobFactory(
        queue=f"q-{state}",
        scheduled_at=past,
        next_attempt_at=past,
        stale_at=past,
        expires_at=past,
        **TRAITS[state],
    )


PAIRS = [(s, op) for s in TRAITS for op in states.OPERATIONS]


@pytest.mark.parametrize(("state", "operation"), PAIRS)
def test_transition_table(state, operation):
    job = make(state, operation)
    allowed = state in states.OPERATIONS[operation]
    idempotent = state in states.IDEMPOTENT.get(operation, frozenset())
    if operation in TARGETED:
        if allowed or idempotent:
            TARGETED[operation](job)
        else:
            with pytest.raises(InvalidTransition) as info:
                TARGETED[operation](job)
            assert info.value.current_state == state
    else:
        SELECTING[operation](job)
    after = Job.objects.get(pk=job.pk).state
    if allowed:
        assert after != state, f"{operation} should have moved a {state} job"
        assert states.can_transition(state, after), f"{state} → {after} is not in the table"
    else:
        assert after == state, f"{operation} must not move a {state} job (it became {after})"
