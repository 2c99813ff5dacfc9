"""Fair claims with real ``ojs_worker`` processes (fair scheduling §9): ten tenants that
push behind another tenant's backlog are served within their turns, not after it.

The assertions are about order (which jobs started before which), never about time, so
they hold however slow the machine is.
"""

from __future__ import annotations

import pytest

import django_ojs
from django_ojs.models import Job
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

OTHERS = "bcdefghijk"


def push(tenant: str, n: int) -> None:
    django_ojs.enqueue_many(
        [
            {"type": "test.slow", "args": [{"duration_ms": 10}], "meta": {"tenant_id": tenant}}
            for _ in range(n)
        ]
    )


def test_a_backlog_of_one_tenant_delays_the_others_by_their_turns_only(processes):
    per_other = 20
    push("a", 3000)
    first = processes.worker("--concurrency", "4")
    processes.worker("--concurrency", "4")
    wait_for(lambda: Job.objects.filter(tenant="a", state="completed").count() >= 50, first, 120)
    for tenant in OTHERS:
        push(tenant, per_other)
    last_push = Job.objects.exclude(tenant="a").order_by("-created_at")[0].created_at
    others = Job.objects.exclude(tenant="a")
    wait_for(lambda: others.filter(state="completed").count() == 10 * per_other, first, 300)
    last_start = max(others.values_list("started_at", flat=True))
    a_jobs = Job.objects.filter(tenant="a")
    # After the last push, the others' remaining jobs took at most their 20 turns, each
    # beside one job of a, plus what the two workers had claimed already (8 slots).
    between = a_jobs.filter(started_at__gt=last_push, started_at__lt=last_start).count()
    assert between <= per_other + 2 * 4, between
    # And a still had a backlog then: without fairness, all of it would have gone first.
    assert (
        a_jobs.filter(started_at__gt=last_start).count()
        + a_jobs.filter(started_at__isnull=True).count()
        > 1000
    )
