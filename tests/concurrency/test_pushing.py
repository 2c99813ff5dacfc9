"""Concurrent bulk pushes: each commits whole or not at all, while workers claim.

A bulk push on PostgreSQL is several pipelined statements in one transaction (one per
batch of ``PUSH_BATCH`` jobs, then the queues' registration). Producers pushing into
the same queues at once, beside claimers, must neither deadlock nor let a claimer see
part of a batch: every job is stored once with its event and claimed once.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection, connections

import django_ojs
from django_ojs import lifecycle
from django_ojs.lifecycle.push import PUSH_BATCH
from django_ojs.models import Event, Job, Queue
from tests.threads import run_threads


@pytest.mark.django_db(transaction=True)
def test_concurrent_bulk_pushes_commit_whole_while_workers_claim():
    postgresql = connection.vendor == "postgresql"
    producers, pushes = (4, 5) if postgresql else (2, 2)
    size = PUSH_BATCH * 2 + 7  # three batches per push
    queues = ["push-a", "push-b"]
    done = threading.Event()
    claimed: list[list] = [[] for _ in range(2)]
    partial: list[str] = []
    seen: set[str] = set()

    def produce(index: int) -> None:
        for n in range(pushes):
            tag = f"p{index}-{n}"
            # Both queues in every push (the jobs alternate, from a different one per
            # producer): registering the queues must not deadlock two pushes.
            jobs = [
                {"type": "push.bulk", "args": [tag, i], "queue": queues[(i + index) % 2]}
                for i in range(size)
            ]
            django_ojs.enqueue_many(jobs)

    def claim(index: int) -> None:
        while True:
            finished = done.is_set()
            jobs = lifecycle.fetch(queues, count=50, worker_id=f"c{index}", fields=["args"])
            for job in jobs:
                claimed[index].append(job.id)
                tag = job.args[0]
                if tag in seen:
                    continue
                seen.add(tag)
                # A push commits whole: once one of its jobs is claimable, all are stored.
                if Job.objects.filter(type="push.bulk", args__0=tag).count() != size:
                    partial.append(tag)
            if jobs:
                lifecycle.ack_many([(j.id, j.attempt, None) for j in jobs], worker_id=f"c{index}")
            elif finished:
                return  # every push had committed before this empty fetch began
            else:
                done.wait(0.01)

    errors: list[BaseException] = []

    def claimer(index: int) -> None:
        try:
            claim(index)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    claimers = [threading.Thread(target=claimer, args=(i,)) for i in range(2)]
    for thread in claimers:
        thread.start()
    try:
        run_threads(producers, produce)
    finally:
        done.set()
        for thread in claimers:
            thread.join(timeout=180)
    assert not errors, errors
    total = producers * pushes * size
    assert Job.objects.filter(type="push.bulk").count() == total
    assert Event.objects.filter(type="job.enqueued", data__job_type="push.bulk").count() == total
    everything = [job_id for ids in claimed for job_id in ids]
    assert len(everything) == total and len(set(everything)) == total
    assert Counter(Job.objects.filter(type="push.bulk").values_list("state", flat=True)) == {
        "completed": total
    }
    assert partial == []
    assert set(Queue.objects.filter(name__in=queues).values_list("name", flat=True)) == set(queues)
