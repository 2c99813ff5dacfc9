"""A tenant's ``max_concurrency`` (multi-tenancy §8.1) holds across real worker processes,
measured from the handlers; the other tenants' jobs run beside it."""

from __future__ import annotations

import signal

import pytest

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def peak(runs: list[tuple[float, float]]) -> int:
    """The most handlers running at one moment: sweep the start and end times."""
    moments = sorted([(b, 1) for b, _ in runs] + [(e, -1) for _, e in runs])
    running = most = 0
    for _, step in moments:
        running += step
        most = max(most, running)
    return most


def test_two_worker_processes_never_run_more_of_a_capped_tenants_jobs_than_its_cap(processes):
    cap, noisy, quiet = 2, 24, 12
    lifecycle.set_limits("noisy", {"max_concurrency": cap})
    # Together the two workers could run 2 x 3 = 6 jobs: more than the cap of 2.
    workers = [processes.worker("--concurrency", "3") for _ in range(2)]
    django_ojs.enqueue_many(
        [{"type": "test.timed", "args": [{"duration_ms": 150}], "meta": {"tenant_id": "noisy"}}]
        * noisy
        + [{"type": "test.timed", "args": [{"duration_ms": 150}], "meta": {"tenant_id": "quiet"}}]
        * quiet
    )
    done = Job.objects.filter(state="completed")
    wait_for(lambda: done.count() == noisy + quiet, workers, timeout=240)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(60) == 0

    def runs(tenant: str) -> list[tuple[float, float]]:
        results = Job.objects.filter(tenant=tenant).values_list("result", flat=True)
        return [(r["began"], r["ended"]) for r in results]

    assert peak(runs("noisy")) <= cap
    # The quiet tenant's jobs did not wait for the noisy one's: they ran beside them.
    assert peak(runs("quiet")) > 1
