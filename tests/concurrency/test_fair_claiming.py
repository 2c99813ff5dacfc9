"""Fair claims stay exactly once: threads claiming tenants' jobs on PostgreSQL (SKIP
LOCKED along ojs_job_claim_idx in virtual-time order) and SQLite (compare-and-set)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job
from tests.threads import run_threads


@pytest.mark.django_db(transaction=True)
def test_threads_claim_every_tenants_job_exactly_once_and_in_turns():
    per_tenant = 300 if connection.vendor == "postgresql" else 60
    threads = 8 if connection.vendor == "postgresql" else 3
    tenants = ["a", "b", "c", "d"]
    lifecycle.set_tenant("d", weight=2)
    for tenant in tenants:
        django_ojs.enqueue_many(
            [
                {"type": "t", "args": [tenant, i], "meta": {"tenant_id": tenant}}
                for i in range(per_tenant)
            ]
        )
    claimed: list[list] = [[] for _ in range(threads)]

    def worker(index: int) -> None:
        while True:
            jobs = lifecycle.fetch(["default"], count=5, worker_id=f"w{index}")
            if not jobs:
                return
            claimed[index].extend((j.id, j.args[0]) for j in jobs)
            lifecycle.ack_many([(j.id, j.attempt, None) for j in jobs], worker_id=f"w{index}")

    run_threads(threads, worker)
    everything = [job_id for ids in claimed for job_id, _ in ids]
    total = per_tenant * len(tenants)
    assert len(everything) == total
    assert len(set(everything)) == total  # nobody got a job twice
    assert Counter(Job.objects.values_list("attempt", flat=True)) == {1: total}
    if connection.vendor == "postgresql":
        assert sum(1 for ids in claimed if ids) > 1
    # In turns: every thread's claims mix the tenants (none drained one tenant first).
    first = Counter(t for ids in claimed for _, t in ids[:8])
    assert set(first) == set(tenants)
