"""Fair claims (OJS fair scheduling §9, multi-tenancy §7.1-§7.2): within a queue and a
priority, tenants with jobs waiting take turns, by weight; FIFO within a tenant, priority
first, jobs without a tenant as before; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job

pytestmark = pytest.mark.django_db


def push(tenant: str, n: int, *, queue: str = "fq", **options) -> list[str]:
    """``n`` jobs of ``tenant`` in one push (ids in push order)."""
    jobs = django_ojs.enqueue_many(
        [
            {
                "type": "t.run",
                "args": [tenant, i],
                "queue": queue,
                "meta": {"tenant_id": tenant},
                **options,
            }
            for i in range(n)
        ]
    )
    return [str(j.id) for j in jobs]


def drain(queue: str = "fq", count: int = 1, **kwargs) -> list[Job]:
    """Every job of ``queue``, claimed ``count`` at a time, in claim order."""
    claimed: list[Job] = []
    while batch := lifecycle.fetch([queue], count, worker_id="w-fair", **kwargs):
        claimed.extend(batch)
    return claimed


def tenants_of(jobs: list[Job]) -> list[str]:
    return [j.args[0] for j in jobs]


def test_a_tenant_with_many_jobs_ahead_delays_another_by_one_round_at_most():
    push("a", 60)
    b = push("b", 3)
    c = push("c", 3)
    order = drain()
    assert len(order) == 66
    position = {str(j.id): i for i, j in enumerate(order)}
    # Round r serves each tenant's r-th job: b's and c's jobs in the first 3 rounds of at
    # most 3 jobs (a's, b's and c's), not after a's 60.
    assert position[b[0]] <= 3 and position[c[0]] <= 3
    assert max(position[i] for i in b + c) < 3 * 3 + 1
    assert tenants_of(order[-50:]) == ["a"] * 50


def test_fifo_within_a_tenant_and_priority_before_tenants():
    a = push("a", 10)
    b = push("b", 10)
    urgent = push("a", 1, priority=5)
    order = [str(j.id) for j in drain(count=3)]
    assert order[0] == urgent[0]  # fair scheduling §9.3: priority first
    assert [i for i in order if i in a] == a  # FIFO within a tenant
    assert [i for i in order if i in b] == b


def test_weights_share_claims_in_proportion(settings):
    lifecycle.set_tenant("heavy", weight=3)
    push("heavy", 40)
    push("light", 40)
    first = tenants_of(drain_some(20))
    # Weight 3 against 1: three of every four claims (the later tenant starts one turn
    # behind, so 15 or 16 of 20).
    assert first.count("heavy") in (15, 16)
    second = tenants_of(drain_some(20))
    assert second.count("heavy") in (14, 15, 16)


def drain_some(n: int) -> list[Job]:
    return lifecycle.fetch(["fq"], n, worker_id="w-fair")


def test_one_by_one_pushes_take_turns_too():
    for i in range(30):
        django_ojs.enqueue("t.run", ["a", i], queue="fq", meta={"tenant_id": "a"})
    django_ojs.enqueue("t.run", ["b", 0], queue="fq", meta={"tenant_id": "b"})
    order = tenants_of(drain_some(3))
    assert "b" in order


def test_jobs_without_a_tenant_come_first_in_id_order():
    push("a", 5)
    plain = [
        str(j.id)
        for j in django_ojs.enqueue_many(
            [{"type": "t.run", "args": ["-", i], "queue": "fq"} for i in range(3)]
        )
    ]
    assert set(Job.objects.filter(tenant="").values_list("vtime", flat=True)) == {0.0}
    order = [str(j.id) for j in drain()]
    assert order[:3] == plain


def test_fairness_off_is_first_in_first_out(settings):
    settings.OJS_TENANT_FAIRNESS = False
    a = push("a", 20)
    b = push("b", 2)
    assert [str(j.id) for j in drain(count=4)] == a + b


def test_promoted_jobs_take_their_turns_from_now():
    push("a", 30)
    later = timezone.now() + timedelta(hours=1)
    b = push("b", 3, scheduled_at=later)
    assert set(Job.objects.filter(pk__in=b).values_list("vtime", flat=True)) == {0.0}
    lifecycle.fetch(["fq"], 10, worker_id="w-fair")  # the head moves on
    assert lifecycle.promote_due(now=later + timedelta(seconds=1)) == 3
    order = drain()
    position = {str(j.id): i for i, j in enumerate(order)}
    assert max(position[i] for i in b) < 3 * 2 + 1  # interleaved with a's, not first or last


def test_a_workflows_jobs_and_a_single_push_take_turns():
    push("a", 20)
    spec = lifecycle.job_spec("t.run", ["b", "wf"], queue="fq", meta={"tenant_id": "b"})
    lifecycle.create_workflow("group", [spec, spec])
    one = django_ojs.enqueue("t.run", ["c", 0], queue="fq", meta={"tenant_id": "c"})
    order = tenants_of(drain())
    assert order.index("b") <= 2 and order.index("c") <= 3
    assert Job.objects.get(pk=one.id).vtime > 0


def test_a_tenant_limited_fetch_takes_its_jobs_in_order():
    push("a", 5)
    b = push("b", 5)
    got = [str(j.id) for j in drain(count=2, tenants=["b"])]
    assert got == b
    assert Job.objects.filter(state="available").count() == 5


def test_jobs_an_operator_or_a_workflow_releases_take_their_turns_too():
    push("a", 30)
    later = timezone.now() + timedelta(hours=1)
    scheduled = django_ojs.enqueue(
        "t.run", ["b", 0], queue="fq", meta={"tenant_id": "b"}, scheduled_at=later
    )
    pending = django_ojs.enqueue(
        "t.run", ["c", 0], queue="fq", meta={"tenant_id": "c"}, pending=True
    )
    lifecycle.fetch(["fq"], 5, worker_id="w-fair")  # the head moves on, to a's turn 6
    lifecycle.run_now(scheduled.id)
    lifecycle.activate(pending.id)
    head = min(Job.objects.filter(state="available", tenant="a").values_list("vtime", flat=True))
    for job_id in (scheduled.id, pending.id):
        assert Job.objects.get(pk=job_id).vtime == head + 1  # the next round, not turn 0
    order = tenants_of(drain())
    assert order.index("b") <= 3 and order.index("c") <= 3  # a turn 6, then a, b, c at 7


def test_rate_limited_jobs_of_several_tenants_take_turns_too():
    limit = {"key": "partner-api", "concurrency": 1000}
    push("a", 40, rate_limit=limit)
    b = push("b", 2, rate_limit=limit)
    order = drain(count=2)
    assert len(order) == 42
    position = {str(j.id): i for i, j in enumerate(order)}
    # Claimed along the limited path (rate-limiting §8.1) in the same turns as the others.
    assert max(position[i] for i in b) <= 4
