"""Fair scheduling's observability (OJS fair scheduling §11): the dispatch, ratio, pool
utilization and starvation metrics (§11.2), and ``scheduling.pool_overloaded`` (§11.1),
emitted once per change."""

from __future__ import annotations

import pytest

import django_ojs
from django_ojs import lifecycle, metrics
from django_ojs.models import Event, WorkerPool
from tests.factories import WorkerFactory
from tests.integration.api_support import client
from tests.integration.pool_support import starving_pool
from tests.integration.test_observability import scrape
from tests.integration.test_tenant_metrics import labelled

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_schedulers():
    lifecycle.forget_pools()
    yield
    lifecycle.forget_pools()


def fill(queue: str, n: int) -> None:
    django_ojs.enqueue_many([{"type": "t.work", "args": [i], "queue": queue} for i in range(n)])


def test_dispatches_are_counted_per_queue_and_pool():
    api = client("admin")
    before = scrape(api)  # this process serves metrics from here on

    def dispatched(now: dict, **labels) -> float:
        return labelled(now.get("ojs_scheduling_dispatch_total", {}), **labels) or 0

    fill("da", 4)
    fill("db", 4)
    fill("dc", 1)
    lifecycle.save_pool("sp", ["da", "db"], strategy="round-robin")
    assert len(lifecycle.PoolFetch("sp", worker_id="w1")(4)) == 4
    assert len(lifecycle.fetch(["dc"], worker_id="w2")) == 1
    now = scrape(api)
    for queue, pool, more in (("da", "sp", 2), ("db", "sp", 2), ("dc", "", 1)):
        assert (
            dispatched(now, queue=queue, pool=pool)
            == dispatched(before, queue=queue, pool=pool) + more
        ), (queue, pool)
    # §11.2 dispatch_ratio: the queues' shares of the last minute's dispatches.
    ratio = now["ojs_scheduling_dispatch_ratio"]
    assert labelled(ratio, queue="da") == pytest.approx(0.4)
    assert labelled(ratio, queue="dc") == pytest.approx(0.2)


def test_nothing_is_counted_in_a_process_that_serves_no_metrics(monkeypatch):
    monkeypatch.setattr(metrics, "_process", None)
    fill("quiet", 1)
    assert len(lifecycle.fetch(["quiet"], worker_id="w")) == 1  # and no error


def test_pool_utilization_is_active_jobs_over_capacity():
    fill("ua", 10)
    fill("ub", 10)
    lifecycle.save_pool("limited", ["ua"], concurrency=4)
    lifecycle.save_pool("open", ["ub"])
    lifecycle.save_pool("empty", ["uc"])
    assert len(lifecycle.PoolFetch("limited", worker_id="l1")(2)) == 2
    WorkerFactory(id="o1", concurrency=5)
    WorkerFactory(id="o2", concurrency=3)
    lifecycle.PoolFetch("open", worker_id="o1")(2)
    lifecycle.PoolFetch("open", worker_id="o2")(2)
    util = scrape(client("admin"))["ojs_scheduling_pool_utilization"]
    assert labelled(util, pool="limited") == 0.5  # 2 of its limit of 4
    assert labelled(util, pool="open") == 0.5  # 4 of its live workers' 5 + 3
    assert labelled(util, pool="empty") is None  # no limit, no workers: no sample
    loads = {name: (active, cap) for name, active, cap in lifecycle.pool_loads()}
    assert loads == {"empty": (0, None), "limited": (2, 4), "open": (4, 8)}


def test_a_starved_queue_is_counted():
    api = client("admin")
    key = (("queue", "low"),)
    base = scrape(api).get("ojs_scheduling_starvation_events_total", {}).get(key, 0)
    fetch, now = starving_pool()
    fetch(3)
    now[0] += 45
    fetch(3)
    assert scrape(api)["ojs_scheduling_starvation_events_total"][key] == base + 1


def overloaded() -> list[Event]:
    return list(Event.objects.filter(type="scheduling.pool_overloaded").order_by("seq"))


def test_pool_overloaded_is_emitted_once_per_change():
    fill("oq", 5)
    lifecycle.save_pool("busy", ["oq"], concurrency=2)
    fetch = lifecycle.PoolFetch("busy", worker_id="b1")
    first = fetch(2)
    assert len(first) == 2
    assert overloaded() == []  # full now, but it has not held a fetch back yet
    for _ in range(3):
        assert fetch(1) == []
    (event,) = overloaded()
    assert event.subject == "busy"
    assert event.data == {"pool": "busy", "active_jobs": 2, "waiting_jobs": 3, "concurrency": 2}
    assert WorkerPool.objects.get(name="busy").overloaded_since is not None
    lifecycle.ack(first[0].id, None, worker_id="b1")
    lifecycle.forget_pools()  # another process would read the row again within a second
    assert len(fetch(1)) == 1  # room again: the state clears, silently
    assert WorkerPool.objects.get(name="busy").overloaded_since is None
    assert len(overloaded()) == 1
    assert fetch(1) == []  # full again, jobs waiting: a second change
    assert [e.data["waiting_jobs"] for e in overloaded()] == [3, 2]


def test_a_full_pool_with_nothing_waiting_is_not_overloaded():
    fill("nq", 2)
    lifecycle.save_pool("exact", ["nq"], concurrency=2)
    fetch = lifecycle.PoolFetch("exact", worker_id="e1")
    assert len(fetch(2)) == 2
    assert fetch(1) == []
    assert overloaded() == []
