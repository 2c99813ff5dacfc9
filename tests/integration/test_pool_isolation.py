"""Pool isolation (OJS fair scheduling §6.3, FS-R006): an isolated pool's queues are
dispatched to its own workers only; a fetch from outside gets nothing from them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_ojs
from django_ojs import lifecycle, scheduling
from django_ojs.lifecycle import isolation
from django_ojs.models import Job, WorkerPool
from tests.integration.api_support import assert_ojs_error, client
from tests.integration.pool_support import fill

pytestmark = pytest.mark.django_db

P = "/admin/pools"


@pytest.fixture(autouse=True)
def fresh_state():
    lifecycle.forget_pools()
    yield
    lifecycle.forget_pools()


@pytest.fixture
def api(db):
    return client("admin")


def queues_of(jobs) -> list[str]:
    return sorted(j.queue for j in jobs)


def test_an_isolated_pools_queue_goes_to_its_workers_only():
    fill("gpu", 3)
    fill("default", 2)
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    lifecycle.save_pool("general", ["gpu", "default"])  # names gpu, but is not gpu's pool
    assert queues_of(lifecycle.fetch(["gpu", "default"], count=5, worker_id="x")) == [
        "default", "default",
    ]  # fmt: skip
    assert lifecycle.fetch(["gpu"], worker_id="x") == []
    assert lifecycle.PoolFetch("general", worker_id="g")(5) == []
    assert queues_of(lifecycle.PoolFetch("gpu-workers", worker_id="m")(5)) == ["gpu"] * 3


def test_a_queue_in_two_isolated_pools_goes_to_both():
    fill("shared", 2)
    lifecycle.save_pool("one", ["shared"], isolated=True)
    lifecycle.save_pool("two", ["shared"], isolated=True)
    assert len(lifecycle.PoolFetch("one", worker_id="a")(1)) == 1
    assert len(lifecycle.PoolFetch("two", worker_id="b")(1)) == 1


def test_without_isolation_any_worker_may_take_a_pools_queue():
    fill("gpu", 1)
    lifecycle.save_pool("gpu-workers", ["gpu"])
    assert queues_of(lifecycle.fetch(["gpu"], worker_id="x")) == ["gpu"]


def test_a_worker_with_its_own_strategy_is_in_no_pool():
    fill("gpu", 2)
    fill("cpu", 2)
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    rules = scheduling.policy(["gpu", "cpu"], strategy="round-robin")
    assert queues_of(lifecycle.fetch_with_policy(rules, 4, worker_id="w")) == ["cpu", "cpu"]


def test_isolation_holds_while_tenants_have_a_concurrency_cap():
    """The claim path of capped tenants (multi-tenancy §8.1) honours isolation too."""
    lifecycle.set_limits("acme", {"max_concurrency": 5})
    for queue in ("gpu", "default"):
        django_ojs.enqueue_many(
            [{"type": "t.x", "args": [i], "queue": queue, "meta": {"tenant_id": "acme"}}
             for i in range(2)]
        )  # fmt: skip
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    got = lifecycle.fetch(["gpu", "default"], count=4, worker_id="x")
    assert queues_of(got) == ["default", "default"]
    assert queues_of(lifecycle.PoolFetch("gpu-workers", worker_id="m")(4)) == ["gpu", "gpu"]


def test_switching_isolation_off_gives_the_queue_back_at_once():
    fill("gpu", 1)
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    assert lifecycle.fetch(["gpu"], worker_id="x") == []
    lifecycle.save_pool("gpu-workers", ["gpu"])  # a PUT without isolated: off
    assert queues_of(lifecycle.fetch(["gpu"], worker_id="x")) == ["gpu"]


def test_deleting_an_isolated_pool_frees_its_queues():
    fill("gpu", 1)
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    assert lifecycle.fetch(["gpu"], worker_id="x") == []
    lifecycle.delete_pool("gpu-workers")
    assert queues_of(lifecycle.fetch(["gpu"], worker_id="x")) == ["gpu"]


def test_without_isolated_pools_a_fetch_reads_them_once_a_second(monkeypatch):
    """Off, isolation costs no statement per fetch: one read per process per second."""
    fill("q", 5)
    lifecycle.save_pool("plain", ["other"])
    now = [100.0]
    monkeypatch.setattr(isolation, "_clock", lambda: now[0])
    isolation.forget()
    lifecycle.fetch(["q"], worker_id="x")  # reads the (empty) set of isolated pools

    def reads(sql: str) -> bool:
        return "ojs_worker_pool" in sql

    with CaptureQueriesContext(connection) as seen:
        for _ in range(3):
            assert len(lifecycle.fetch(["q"], worker_id="x")) == 1
    assert not [q for q in seen.captured_queries if reads(q["sql"])]
    now[0] += isolation.REFRESH_SECONDS
    with CaptureQueriesContext(connection) as seen:
        lifecycle.fetch(["q"], worker_id="x")
    assert len([q for q in seen.captured_queries if reads(q["sql"])]) == 1


def test_another_processs_change_is_seen_within_the_refresh(monkeypatch):
    fill("gpu", 2)
    now = [100.0]
    monkeypatch.setattr(isolation, "_clock", lambda: now[0])
    assert len(lifecycle.fetch(["gpu"], worker_id="x")) == 1
    # Another process isolates the pool: this one's copy is kept for up to a second.
    WorkerPool.objects.create(name="gpu-workers", queues=["gpu"], isolated=True)
    now[0] += isolation.REFRESH_SECONDS
    assert lifecycle.fetch(["gpu"], worker_id="x") == []


# ----------------------------------------------------------------------------- HTTP


def test_http_put_isolated_and_read_it_back(api):
    response = api.request("PUT", f"{P}/gpu-workers", {"queues": ["gpu"], "isolated": True})
    assert response.status_code == 201, response.body
    assert response.body["pool"]["isolated"] is True
    assert api.get(f"{P}/gpu-workers").body["pool"]["isolated"] is True
    shown = api.get(f"{P}/gpu-workers").body["pool"]
    assert api.request("PUT", f"{P}/gpu-workers", shown).status_code == 200  # round trip
    assert WorkerPool.objects.get(name="gpu-workers").isolated


def test_http_put_refuses_an_isolated_that_is_not_a_boolean(api):
    error = assert_ojs_error(api.request("PUT", f"{P}/p", {"queues": ["a"], "isolated": 1}), 400)
    assert error["details"]["field"] == "isolated"


def test_http_fetch_outside_the_pool_gets_an_empty_list(api):
    fill("gpu", 2)
    fill("default", 1)
    lifecycle.save_pool("gpu-workers", ["gpu"], isolated=True)
    response = api.post("/workers/fetch", {"queues": ["gpu"], "count": 5, "worker_id": "h1"})
    assert response.status_code == 200, response.body
    assert response.body["jobs"] == []  # §6.5: no job for this worker is not an error
    response = api.post(
        "/workers/fetch", {"queues": ["gpu", "default"], "count": 5, "worker_id": "h1"}
    )
    assert [j["queue"] for j in response.body["jobs"]] == ["default"]
    response = api.post("/workers/fetch", {"pool": "gpu-workers", "count": 5, "worker_id": "h2"})
    assert [j["queue"] for j in response.body["jobs"]] == ["gpu", "gpu"]
    assert set(Job.objects.filter(queue="gpu").values_list("worker_id", flat=True)) == {"h2"}
