"""A concurrency limit holds across real worker processes, measured from the handlers."""

from __future__ import annotations

import signal

import pytest

import django_ojs
from django_ojs.models import Job
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_two_worker_processes_never_run_more_than_the_limit_at_once(processes):
    limit, total = 3, 30
    # Together the two workers could run 2 x 2 = 4 jobs: more than the limit of 3.
    workers = [processes.worker("--concurrency", "2") for _ in range(2)]
    django_ojs.enqueue_many(
        [{"type": "test.timed", "args": [{"duration_ms": 150}],
          "rate_limit": {"key": "partner-api", "concurrency": limit}} for _ in range(total)]
    )  # fmt: skip
    wait_for(lambda: Job.objects.filter(state="completed").count() == total, workers, timeout=240)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(60) == 0

    runs = [(r["began"], r["ended"]) for r in Job.objects.values_list("result", flat=True)]
    # The most handlers running at one moment: sweep the start and end times.
    moments = sorted([(b, 1) for b, _ in runs] + [(e, -1) for _, e in runs])
    running = peak = 0
    for _, step in moments:
        running += step
        peak = max(peak, running)
    assert peak <= limit
