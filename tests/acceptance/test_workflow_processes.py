"""Workflows under real ``manage.py ojs_worker`` processes on PostgreSQL (workflows §6.4).

A batch of 500 jobs acked concurrently by 4 worker processes (each in batches, through
``ack_many``) must fire its callbacks exactly once with exact counters; a 50-step chain
must run strictly in order, each step seeing every result before it.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import django_ojs
from django_ojs.models import Event, Job, Workflow
from tests.acceptance.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.postgresql]

job = django_ojs.job
QUEUES = ("--queues", "default,callbacks")


def test_batch_of_500_acked_by_4_workers_fires_its_callbacks_once(processes):
    workers = [processes.worker(*QUEUES, "--concurrency", "8") for _ in range(4)]
    wf = django_ojs.batch(
        [job("test.workflow_step", [i]) for i in range(500)],
        on_complete=job("test.workflow_step", [-1], queue="callbacks"),
        on_success=job("test.workflow_step", [-2], queue="callbacks"),
        on_failure=job("test.workflow_step", [-3], queue="callbacks"),
    )
    wait_for(lambda: Workflow.objects.get(pk=wf.pk).state == "completed", workers, timeout=300)
    wf.refresh_from_db()
    assert (wf.total, wf.completed, wf.failed, wf.cancelled) == (500, 500, 0, 0)
    assert sorted(wf.fired) == ["on_complete", "on_success"]
    members = Job.objects.filter(workflow=wf, workflow_step__gte=0)
    assert members.filter(state="completed").count() == 500
    # Every worker took part: the counters were moved by concurrent transactions.
    assert len(set(members.values_list("worker_id", flat=True))) == 4
    callbacks = {j.args[0]: j for j in Job.objects.filter(workflow=wf, workflow_step=-1)}
    assert {n: j.state for n, j in callbacks.items()} == {
        -1: "completed", -2: "completed", -3: "cancelled",
    }  # fmt: skip
    for n in (-1, -2):
        assert callbacks[n].attempt == 1
        assert callbacks[n].result["seen"] == list(range(500))  # every member's result, in order
    ran = Counter(
        Event.objects.filter(
            type="job.started", job_id__in=[c.id for c in callbacks.values()]
        ).values_list("job_id", flat=True)
    )
    assert sorted(ran.values()) == [1, 1]  # each selected callback ran exactly once
    finished = Event.objects.filter(type="workflow.completed", subject=f"workflow:{wf.id}")
    assert finished.count() == 1


def test_chain_of_50_steps_runs_strictly_in_order(processes):
    workers = [processes.worker(*QUEUES, "--concurrency", "4") for _ in range(2)]
    wf = django_ojs.chain([job("test.workflow_step", [i]) for i in range(50)])
    wait_for(lambda: Workflow.objects.get(pk=wf.pk).state == "completed", workers, timeout=300)
    wf.refresh_from_db()
    assert (wf.completed, wf.failed) == (50, 0)
    steps = list(Job.objects.filter(workflow=wf).order_by("workflow_step"))
    assert [s.workflow_step for s in steps] == list(range(50))
    # Event sequence numbers are taken in commit order here: step i+1 was claimed (its
    # job.started) only after step i's job.completed was written, never two at once.
    seq = {
        (e.job_id, e.type): e.seq
        for e in Event.objects.filter(
            job_id__in=[s.id for s in steps], type__in=["job.started", "job.completed"]
        )
    }
    for before, after in itertools.pairwise(steps):
        assert seq[before.id, "job.completed"] < seq[after.id, "job.started"]
    for i, step in enumerate(steps):
        assert step.attempt == 1
        assert step.result["seen"] == list(range(i))


def test_nested_chains_in_a_group_in_a_chain_under_3_workers(processes):
    """Workflows §10: 3 levels (chain → group → 20 chains of 3) run by concurrent workers:
    each inner chain in order, the group once all 20 are done, the outer chain after it."""
    workers = [processes.worker(*QUEUES, "--concurrency", "8") for _ in range(3)]
    inner = [
        django_ojs.Chain(*(job("test.workflow_step", [100 * c + s]) for s in range(3)))
        for c in range(20)
    ]
    wf = django_ojs.chain(
        job("test.workflow_step", [0]),
        django_ojs.Group(*inner, name="fan-out"),
        job("test.workflow_step", [9999]),
    )
    wait_for(lambda: Workflow.objects.get(pk=wf.pk).state == "completed", workers, timeout=300)
    wf.refresh_from_db()
    assert (wf.completed, wf.failed, wf.cancelled) == (3, 0, 0)
    group = Workflow.objects.get(parent=wf)
    assert (group.state, group.completed, group.total) == ("completed", 20, 20)
    chains = Workflow.objects.filter(parent=group)
    assert chains.count() == 20
    assert set(chains.values_list("state", "completed")) == {("completed", 3)}
    for chain in chains:
        steps = list(Job.objects.filter(workflow=chain).order_by("workflow_step"))
        base = steps[0].args[0]
        # Each inner step saw the outer step 0, then the inner steps before it.
        assert [s.result["seen"] for s in steps] == [
            [0], [0, base], [0, base, base + 1],
        ]  # fmt: skip
        assert all(s.attempt == 1 for s in steps)
    last = Job.objects.get(workflow=wf, workflow_step=2)
    # The outer chain's last step: step 0's result, then the group's (each chain's last).
    assert last.parent_results[0]["n"] == 0
    assert [r["n"] for r in last.parent_results[1]] == [100 * c + 2 for c in range(20)]
    finished = Event.objects.filter(type="workflow.completed", subject=f"workflow:{group.id}")
    assert finished.count() == 1
