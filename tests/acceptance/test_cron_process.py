"""Cron across real worker processes: one job per slot, none lost when a worker dies."""

from __future__ import annotations

import signal
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from django_ojs.models import CronJob, Event, Job
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CRON = {"tick": {"cron": "@every 1s", "type": "acceptance.tick", "queue": "cron-acceptance"}}
RUN_SLOTS = 20  # about 20 s of schedule


def _slots() -> list[datetime]:
    values = Job.objects.filter(meta__cron_name="tick").values_list("meta", flat=True)
    return sorted(datetime.fromisoformat(m["cron_scheduled_at"]) for m in values)


def test_three_workers_fire_every_slot_once_also_when_one_is_killed(processes):
    # Nobody fetches the cron's queue, so every run stays "available" (no overlap to skip).
    workers = [processes.worker("--queues", "default", OJS_CRON=CRON) for _ in range(3)]
    wait_for(lambda: CronJob.objects.filter(pk="tick").exists(), workers, timeout=60)
    wait_for(lambda: len(_slots()) >= RUN_SLOTS // 2, workers, timeout=120)
    victim = workers.pop(0)
    victim.popen.kill()  # SIGKILL in the middle of the schedule
    victim.wait(10)
    wait_for(lambda: len(_slots()) >= RUN_SLOTS, workers, timeout=120)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(60) == 0

    slots = _slots()
    assert len(slots) == len(set(slots)), "a slot fired twice"
    # Every slot from the first to the last either fired, or was left out by the catch-up
    # rule after a stall longer than the interval (counted in the next run's event).
    missed = sum(e.data["missed"] for e in Event.objects.filter(type="cron.triggered"))
    expected = int((slots[-1] - slots[0]) / timedelta(seconds=1)) + 1
    assert len(slots) + missed == expected
    assert all((b - a) % timedelta(seconds=1) == timedelta(0) for a, b in pairwise(slots))
    assert CronJob.objects.get(pk="tick").run_count == len(slots)
