"""Per-tenant limits hold under concurrency (multi-tenancy §8): threads fetching while a
tenant has a ``max_concurrency`` never run more of its jobs at once, and threads pushing
for a tenant with a ``max_queue_depth`` never get more in than it allows. PostgreSQL:
the tenants' locks and ``SKIP LOCKED``; SQLite: its single write lock."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from django.db import connection

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import TenantLimitExceeded
from django_ojs.models import Job
from tests.threads import run_threads


@pytest.mark.django_db(transaction=True)
def test_threads_never_run_more_of_a_capped_tenants_jobs_than_its_cap():
    postgres = connection.vendor == "postgresql"
    cap, threads = 3, (8 if postgres else 3)
    noisy, quiet = (120, 60) if postgres else (30, 15)
    lifecycle.set_limits("noisy", {"max_concurrency": cap})
    django_ojs.enqueue_many(
        [{"type": "t", "args": ["noisy"], "meta": {"tenant_id": "noisy"}}] * noisy
        + [{"type": "t", "args": ["quiet"], "meta": {"tenant_id": "quiet"}}] * quiet
    )
    lock = threading.Lock()
    running = Counter[str]()
    most = Counter[str]()
    done: list[tuple[str, str]] = []

    def worker(index: int) -> None:
        idle = 0
        while idle < 20:
            jobs = lifecycle.fetch(["default"], count=2, worker_id=f"w{index}")
            if not jobs:
                if not Job.objects.filter(state__in=["available", "active"]).exists():
                    return
                idle += 1
                time.sleep(0.01)  # another thread holds the capped tenant's last jobs
                continue
            idle = 0
            with lock:
                for job in jobs:
                    running[job.tenant] += 1
                    most[job.tenant] = max(most[job.tenant], running[job.tenant])
            time.sleep(0.002)  # hold them a moment, as a handler would
            with lock:
                for job in jobs:
                    running[job.tenant] -= 1
                    done.append((str(job.id), job.tenant))
            # Acked after the count is lowered: the database frees the slot after that.
            lifecycle.ack_many([(j.id, j.attempt, None) for j in jobs], worker_id=f"w{index}")

    run_threads(threads, worker)
    assert len(done) == noisy + quiet
    assert len({job_id for job_id, _ in done}) == noisy + quiet  # each exactly once
    assert Counter(t for _, t in done) == {"noisy": noisy, "quiet": quiet}
    assert most["noisy"] <= cap  # (without the tenants' locks: 6 of them at once)
    assert set(Job.objects.values_list("state", flat=True)) == {"completed"}


@pytest.mark.django_db(transaction=True)
def test_threads_pushing_for_a_tenant_never_pass_its_max_queue_depth():
    threads = 8 if connection.vendor == "postgresql" else 3
    lifecycle.set_limits("acme", {"max_queue_depth": 25})
    accepted = Counter[int]()
    refused = Counter[int]()

    def producer(index: int) -> None:
        for i in range(10):
            try:
                if i % 2:
                    django_ojs.enqueue("t", [index, i], meta={"tenant_id": "acme"})
                    accepted[index] += 1
                else:
                    django_ojs.enqueue_many(
                        [{"type": "t", "args": [index, i], "meta": {"tenant_id": "acme"}}] * 2
                    )
                    accepted[index] += 2
            except TenantLimitExceeded:
                refused[index] += 1

    run_threads(threads, producer)
    assert Job.objects.filter(tenant="acme").count() == sum(accepted.values())
    assert 24 <= sum(accepted.values()) <= 25  # full, but for a batch of 2 that did not fit
    assert sum(refused.values()) > 0
