"""Worker pools under concurrency: fetches from many threads at once still claim each job
once, keep the pool's weights, and never exceed its concurrency limit."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job, WorkerPool
from tests.threads import run_threads


@pytest.fixture(autouse=True)
def fresh_schedulers():
    lifecycle.forget_pools()
    yield
    lifecycle.forget_pools()


@pytest.mark.django_db(transaction=True)
def test_threads_fetching_from_a_weighted_pool_keep_its_weights():
    threads = 6 if connection.vendor == "postgresql" else 3
    count, wanted = 2, 480
    for queue in ("bulk", "mail"):
        django_ojs.enqueue_many([{"type": "t", "args": [i], "queue": queue} for i in range(600)])
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 3, "mail": 1})  # fmt: skip
    claimed: list[list] = [[] for _ in range(threads)]
    total = [0]
    lock = threading.Lock()

    def worker(index):
        fetch = lifecycle.PoolFetch("mixed", worker_id=f"w{index}")
        while True:
            with lock:
                if total[0] >= wanted:
                    return
                total[0] += count
            claimed[index].extend(fetch(count))

    run_threads(threads, worker)
    jobs = [job for batch in claimed for job in batch]
    assert len(jobs) == len({j.id for j in jobs}) == total[0]  # each job once
    got = Counter(j.queue for j in jobs)
    # Neither queue ran dry, so the claims are 3:1; fetches planned at the same moment may
    # each take the same queue's turn, which the next plans repay: off by at most what
    # the threads have in flight at once, whatever the machine's speed.
    slack = threads * count
    assert abs(got["bulk"] - total[0] * 3 / 4) <= slack, got
    assert abs(got["mail"] - total[0] / 4) <= slack, got


@pytest.mark.django_db(transaction=True)
def test_a_pools_concurrency_limit_holds_across_concurrent_fetches():
    threads = 8 if connection.vendor == "postgresql" else 4
    django_ojs.enqueue_many([{"type": "t", "args": [i], "queue": "a"} for i in range(100)])
    lifecycle.save_pool("small", ["a"], concurrency=5)
    got = [0] * threads

    def worker(index):
        got[index] = len(lifecycle.PoolFetch("small", worker_id=f"w{index}")(3))

    run_threads(threads, worker)
    assert sum(got) == 5
    assert Job.objects.filter(state="active").count() == 5


@pytest.mark.django_db(transaction=True)
def test_concurrent_saves_of_a_new_pool_create_it_once():
    threads = 8 if connection.vendor == "postgresql" else 4
    created = [None] * threads

    def save(index):
        _, created[index] = lifecycle.save_pool("same", [f"q{index}"])

    run_threads(threads, save)
    assert created.count(True) == 1
    assert WorkerPool.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_full_pool_reports_its_overload_once_across_concurrent_fetches():
    """§11.1 scheduling.pool_overloaded: many fetches of a full pool at once, one event."""
    from django_ojs.models import Event

    threads = 8 if connection.vendor == "postgresql" else 4
    django_ojs.enqueue_many([{"type": "t", "args": [i], "queue": "a"} for i in range(20)])
    lifecycle.save_pool("small", ["a"], concurrency=2)
    assert len(lifecycle.PoolFetch("small", worker_id="w-first")(2)) == 2

    def worker(index):
        for _ in range(3):
            assert lifecycle.PoolFetch("small", worker_id=f"w{index}")(1) == []

    run_threads(threads, worker)
    (event,) = Event.objects.filter(type="scheduling.pool_overloaded")
    assert event.data["waiting_jobs"] == 18
    assert WorkerPool.objects.get(name="small").overloaded_since is not None
