"""``manage.py ojs_worker --pool NAME``: a real worker process joins a worker pool and
takes the pool's queues in the ratio of its weights (OJS fair scheduling §6-§7)."""

from __future__ import annotations

from collections import Counter

import pytest

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job, Worker
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_worker_in_a_weighted_pool_claims_three_to_one(processes):
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 3, "mail": 1})  # fmt: skip
    for queue in ("bulk", "mail"):
        django_ojs.enqueue_many(
            [{"type": "test.noop", "args": [i], "queue": queue} for i in range(300)]
        )
    django_ojs.enqueue("test.noop", queue="elsewhere")  # not the pool's: never claimed
    worker = processes.worker("--pool", "mixed", "--concurrency", "4")
    row = wait_for(lambda: Worker.objects.filter(pool="mixed").first(), worker)
    assert row.queues == ["bulk", "mail"]
    wait_for(lambda: Job.objects.filter(state="completed").count() >= 240, worker, timeout=240)
    # The first 200 claims, in the order they were made (neither queue ran dry by then):
    # 3:1, off by at most one fetch (4 jobs) at the cut. Counted, not timed.
    first = Job.objects.filter(started_at__isnull=False).order_by("started_at", "id")[:200]
    got = Counter(first.values_list("queue", flat=True))
    assert abs(got["bulk"] - 150) <= 4, got
    assert abs(got["mail"] - 50) <= 4, got
    wait_for(lambda: Job.objects.filter(state="completed").count() == 600, worker, timeout=240)
    assert Job.objects.get(queue="elsewhere").state == "available"
    assert set(
        Job.objects.filter(queue__in=["bulk", "mail"]).values_list("attempt", flat=True)
    ) == {1}
    assert "worker pool mixed" in worker.output()


def test_pool_changes_reach_a_running_worker(processes):
    lifecycle.save_pool("p", ["first"])
    worker = processes.worker("--pool", "p", "--concurrency", "2")
    one = django_ojs.enqueue("test.noop", queue="first")
    wait_for(lambda: Job.objects.get(pk=one.pk).state == "completed", worker)
    lifecycle.save_pool("p", ["second"])  # read again by the worker within a second
    two = django_ojs.enqueue("test.noop", queue="second")
    wait_for(lambda: Job.objects.get(pk=two.pk).state == "completed", worker, timeout=120)


def test_a_worker_whose_pool_is_deleted_waits_for_it(processes):
    lifecycle.save_pool("p", ["first"])
    worker = processes.worker("--pool", "p", "--concurrency", "1")
    lifecycle.delete_pool("p")
    wait_for(lambda: "Worker pool 'p' not found" in worker.output(), worker, timeout=60)
    job = django_ojs.enqueue("test.noop", queue="again")
    lifecycle.save_pool("p", ["again"])
    wait_for(lambda: Job.objects.get(pk=job.pk).state == "completed", worker, timeout=120)
    assert worker.output().count("Worker pool 'p' not found") == 1


def test_an_isolated_pools_queue_waits_for_a_worker_of_that_pool(processes):
    """Fair scheduling §6.3: a worker outside the pool never takes the pool's queue, even
    when it names it first; a worker of the pool does."""
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    gpu = django_ojs.enqueue("test.noop", queue="gpu")
    plain = django_ojs.enqueue("test.noop", queue="default")
    outsider = processes.worker("--queues", "gpu,default", "--concurrency", "2")
    # Its fetches ask gpu first: had gpu been allowed, its job would have gone first.
    wait_for(lambda: Job.objects.get(pk=plain.pk).state == "completed", outsider)
    assert Job.objects.get(pk=gpu.pk).state == "available"
    member = processes.worker("--pool", "gpu-workers", "--concurrency", "1")
    wait_for(lambda: Job.objects.get(pk=gpu.pk).state == "completed", member, timeout=120)
    row = Worker.objects.get(pool="gpu-workers")
    assert Job.objects.get(pk=gpu.pk).worker_id == row.id
