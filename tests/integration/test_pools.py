"""Worker pools (OJS fair scheduling §6-§10): pool fetches, weights, starvation
prevention, membership, and the admin API's pools and scheduling statistics."""

from __future__ import annotations

from collections import Counter

import pytest

from django_ojs import lifecycle
from django_ojs.exceptions import PoolNotFound, ValidationError
from django_ojs.models import Event, Job, Worker, WorkerPool
from django_ojs.states import JobState
from tests.integration.api_support import assert_ojs_error, client
from tests.integration.pool_support import fill, starving_pool

pytestmark = pytest.mark.django_db

P = "/admin/pools"


@pytest.fixture(autouse=True)
def fresh_schedulers():
    lifecycle.forget_pools()
    yield
    lifecycle.forget_pools()


@pytest.fixture
def api(db):
    return client("admin")


def claimed_queues(jobs) -> Counter[str]:
    return Counter(j.queue for j in jobs)


# ------------------------------------------------------------------ fairness (counts)


@pytest.mark.parametrize("count", [1, 3, 8])
def test_weighted_pool_hands_out_three_to_one_across_busy_queues(count):
    """Weights 3:1 over two queues that never run dry: the claims, counted, are 3:1 (off by
    at most one fetch's worth), however the fetches are sized; no clock is involved."""
    fill("bulk", 400)
    fill("mail", 400)
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 3, "mail": 1})  # fmt: skip
    fetch = lifecycle.PoolFetch("mixed", worker_id="w1")
    got: Counter[str] = Counter()
    for _ in range(240 // count):
        jobs = fetch(count)
        assert len(jobs) == count
        got += claimed_queues(jobs)
    total = sum(got.values())
    assert abs(got["bulk"] - total * 3 / 4) <= count
    assert abs(got["mail"] - total / 4) <= count
    assert Job.objects.filter(state=JobState.ACTIVE).count() == total  # each once


def test_weighted_pool_is_work_conserving_when_a_queue_runs_dry():
    fill("bulk", 30)
    fill("mail", 2)
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 1, "mail": 3})  # fmt: skip
    fetch = lifecycle.PoolFetch("mixed", worker_id="w1")
    jobs = fetch(10)
    assert claimed_queues(jobs) == {"mail": 2, "bulk": 8}  # mail's share went to bulk
    assert len(fetch(100)) == 22
    assert fetch(5) == []


def test_round_robin_pool_mixes_queues_instead_of_draining_the_first():
    fill("a", 3)
    fill("b", 3)
    lifecycle.save_pool("rr", ["a", "b"])
    assert WorkerPool.objects.get(name="rr").strategy == "round-robin"  # §6.1's default
    jobs = lifecycle.PoolFetch("rr")(4)
    assert claimed_queues(jobs) == {"a": 2, "b": 2}


def test_strict_pool_drains_in_order():
    fill("a", 3)
    fill("b", 3)
    lifecycle.save_pool("st", ["a", "b"], strategy="strict")
    assert claimed_queues(lifecycle.PoolFetch("st")(4)) == {"a": 3, "b": 1}


def test_least_loaded_pool_serves_the_deepest_backlog():
    fill("a", 2)
    fill("b", 5)
    lifecycle.save_pool("ll", ["a", "b"], strategy="least-loaded")
    assert claimed_queues(lifecycle.PoolFetch("ll")(2)) == {"b": 2}


def test_least_loaded_caps_an_http_worker_at_its_concurrency():
    fill("a", 10)
    lifecycle.save_pool("ll", ["a"], strategy="least-loaded")
    lifecycle.register("w1", concurrency=3)
    fetch = lifecycle.PoolFetch("ll", worker_id="w1")
    assert len(fetch(10)) == 3
    assert fetch(10) == []  # §7.2: no capacity left


def test_starvation_prevention_gives_a_strict_pools_last_queue_its_share():
    fill("critical", 300)
    fill("analytics", 300)
    lifecycle.save_pool(
        "general", ["critical", "analytics"], strategy="strict",
        starvation={"enabled": True, "rotation_interval": "PT1H", "min_dispatch_ratio": 0.1},
    )  # fmt: skip
    fetch = lifecycle.PoolFetch("general")
    got: Counter[str] = Counter()
    for _ in range(100):
        got += claimed_queues(fetch(2))
    assert sum(got.values()) == 200
    assert 20 <= got["analytics"] <= 22  # at least 10 %, while critical never runs dry


def test_without_starvation_prevention_strict_starves_the_last_queue():
    fill("critical", 50)
    fill("analytics", 50)
    lifecycle.save_pool("general", ["critical", "analytics"], strategy="strict")
    fetch = lifecycle.PoolFetch("general")
    got: Counter[str] = Counter()
    for _ in range(40):
        got += claimed_queues(fetch(1))
    assert got == {"critical": 40}


def test_pool_concurrency_limits_active_jobs_across_its_workers():
    fill("a", 10)
    lifecycle.save_pool("small", ["a"], concurrency=3)
    assert len(lifecycle.PoolFetch("small", worker_id="w1")(2)) == 2
    assert len(lifecycle.PoolFetch("small", worker_id="w2")(5)) == 1
    assert lifecycle.PoolFetch("small", worker_id="w3")(5) == []
    (held,) = Job.objects.filter(worker_id="w2")
    lifecycle.ack(held.id, None, worker_id="w2")
    assert len(lifecycle.PoolFetch("small", worker_id="w3")(5)) == 1


def test_a_pool_fetch_records_membership_and_respects_a_quiet_worker(
    django_capture_on_commit_callbacks,
):
    fill("a", 3)
    lifecycle.save_pool("p", ["a", "b"])
    assert len(lifecycle.PoolFetch("p", worker_id="w1")(1)) == 1
    worker = Worker.objects.get(id="w1")
    assert (worker.pool, worker.queues) == ("p", ["a", "b"])
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.set_directive("w1", "quiet")
    assert lifecycle.PoolFetch("p", worker_id="w1")(1) == []


def test_pool_changes_are_seen_by_the_next_fetch():
    fill("a", 2)
    fill("b", 2)
    lifecycle.save_pool("p", ["a"])
    fetch = lifecycle.PoolFetch("p")
    assert claimed_queues(fetch(1)) == {"a": 1}
    lifecycle.save_pool("p", ["b"])
    assert claimed_queues(fetch(1)) == {"b": 1}
    assert fetch.queues == ["b"]


def test_pools_are_validated():
    with pytest.raises(ValidationError) as info:
        lifecycle.save_pool("Bad Name", ["a"])
    assert info.value.details["field"] == "name"
    with pytest.raises(ValidationError):
        lifecycle.save_pool("threads", ["a"])  # ojs_worker --pool threads means execution
    with pytest.raises(ValidationError):
        lifecycle.save_pool("p", ["a"], concurrency=0)
    with pytest.raises(PoolNotFound):
        lifecycle.PoolFetch("missing")
    with pytest.raises(PoolNotFound):
        lifecycle.delete_pool("missing")


def test_changing_a_strategy_emits_scheduling_rebalanced():
    lifecycle.save_pool("p", ["a", "b"])
    lifecycle.save_pool("p", ["a", "b"], strategy="weighted", weights={"a": 2})
    (event,) = Event.objects.filter(type="scheduling.rebalanced")
    assert event.data["pool"] == "p"
    assert (event.data["previous_strategy"], event.data["new_strategy"]) == (
        "round-robin",
        "weighted",
    )


# ---------------------------------------------------------------------- HTTP: fetch


def test_http_fetch_naming_a_pool_uses_its_queues_and_weights(api):
    fill("bulk", 40)
    fill("mail", 40)
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 3, "mail": 1})  # fmt: skip
    got: Counter[str] = Counter()
    for _ in range(8):
        response = api.post("/workers/fetch", {"pool": "mixed", "count": 2, "worker_id": "h1"})
        assert response.status_code == 200, response.body
        got += Counter(j["queue"] for j in response.body["jobs"])
    assert got == {"bulk": 12, "mail": 4}
    assert Worker.objects.get(id="h1").pool == "mixed"


def test_http_fetch_pool_configuration_takes_precedence_over_queues(api):
    fill("a", 1)
    fill("b", 1)
    lifecycle.save_pool("p", ["b"])
    response = api.post("/workers/fetch", {"pool": "p", "queues": ["a"], "count": 5})
    assert [j["queue"] for j in response.body["jobs"]] == ["b"]  # §5.2


def test_http_fetch_with_the_workers_own_weights(api):
    fill("a", 20)
    fill("b", 20)
    got: Counter[str] = Counter()
    for _ in range(8):
        response = api.post(
            "/workers/fetch",
            {"queues": ["a", "b"], "strategy": "weighted", "weights": {"a": 1, "b": 3},
             "worker_id": "h2"},
        )  # fmt: skip
        assert response.status_code == 200, response.body
        got += Counter(j["queue"] for j in response.body["jobs"])
    assert got == {"a": 2, "b": 6}


def test_http_fetch_with_a_strategy_gives_a_quiet_worker_nothing(
    api, django_capture_on_commit_callbacks
):
    fill("a", 2)
    fill("b", 2)
    lifecycle.register("h4")
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.set_directive("h4", "quiet")
    body = {"queues": ["a", "b"], "strategy": "round-robin", "worker_id": "h4", "count": 4}
    assert api.post("/workers/fetch", body).body["jobs"] == []


def test_http_fetch_bad_pool_input_is_an_ojs_error(api):
    assert_ojs_error(api.post("/workers/fetch", {"pool": "missing"}), 404, "not_found")
    assert_ojs_error(api.post("/workers/fetch", {"pool": 7}), 400)
    assert_ojs_error(api.post("/workers/fetch", {"queues": ["a"], "strategy": "fastest"}), 400)
    assert_ojs_error(api.post("/workers/fetch", {"queues": ["a"], "weights": {"a": -1}}), 400)


def test_http_fetch_of_a_pool_checks_the_keys_queues(db):
    from django_ojs import apikeys

    lifecycle.save_pool("p", ["secret"])
    limited = apikeys.create("limited", "worker", queues=["public"])[1]
    from tests.integration.api_support import OJSClient

    response = OJSClient(limited).post("/workers/fetch", {"pool": "p"})
    assert_ojs_error(response, 403)


def test_heartbeat_declares_the_pool(api):
    lifecycle.save_pool("p", ["a"])
    response = api.post("/workers/heartbeat", {"worker_id": "h3", "pool": "p"})
    assert response.status_code == 200
    assert Worker.objects.get(id="h3").pool == "p"


# ------------------------------------------------------------------ HTTP: admin API


def test_put_creates_then_replaces_a_pool(api):
    body = {"queues": ["critical", "payments"], "concurrency": 20, "strategy": "strict"}
    created = api.request("PUT", f"{P}/critical-workers", body)
    assert created.status_code == 201, created.body
    pool = created.body["pool"]
    assert pool["name"] == "critical-workers"
    assert (pool["queues"], pool["concurrency"], pool["strategy"]) == (
        ["critical", "payments"], 20, "strict",
    )  # fmt: skip
    again = api.request("PUT", f"{P}/critical-workers", {**body, "strategy": "round-robin"})
    assert again.status_code == 200
    assert again.body["pool"]["strategy"] == "round-robin"
    assert WorkerPool.objects.count() == 1


def test_put_accepts_the_suites_queue_object_form(api):
    body = {"name": "conformance-pool", "strategy": "weighted",
            "queues": {"high-priority": {"weight": 70}, "low-priority": {"weight": 30}}}  # fmt: skip
    response = api.request("PUT", f"{P}/conformance-pool", body)
    assert response.status_code == 201, response.body
    assert response.body["pool"]["weights"] == {"high-priority": 70, "low-priority": 30}
    assert response.body["pool"]["queues"] == ["high-priority", "low-priority"]


def test_put_accepts_what_get_returned(api):
    api.request("PUT", f"{P}/p", {"queues": ["a"], "strategy": "weighted", "weights": {"a": 2}})
    shown = api.get(f"{P}/p").body["pool"]
    response = api.request("PUT", f"{P}/p", shown)
    assert response.status_code == 200, response.body
    assert response.body["pool"]["weights"] == {"a": 2}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "queues"),
        ({"queues": []}, "queues"),
        ({"queues": ["a"], "strategy": "lottery"}, "strategy"),
        ({"queues": ["a"], "weights": {"a": 0}}, "weights.a"),
        ({"queues": ["a"], "concurrency": -1}, "concurrency"),
        ({"queues": ["a"], "name": "other"}, "name"),
        ({"queues": ["a"], "isolated": "yes"}, "isolated"),
        ({"queues": ["a"], "colour": "red"}, "colour"),
        ({"queues": ["a"], "starvation_prevention": {"min_dispatch_ratio": 2}},
         "starvation_prevention.min_dispatch_ratio"),
    ],
)  # fmt: skip
def test_put_refuses_bad_pools_naming_the_field(api, body, field):
    error = assert_ojs_error(api.request("PUT", f"{P}/p", body), 400)
    assert error["details"]["field"] == field
    assert not WorkerPool.objects.exists()


def test_list_pools_in_the_spec_and_admin_ui_shapes(api):
    lifecycle.save_pool("default-workers", ["default", "email"], strategy="weighted",
                        weights={"default": 3, "email": 2}, concurrency=50)  # fmt: skip
    fill("default", 3)
    lifecycle.register("w1", pool="default-workers")
    lifecycle.register("w2", pool="default-workers")
    lifecycle.PoolFetch("default-workers", worker_id="w1", register=False)(2)
    response = api.get(P)
    assert response.status_code == 200
    (item,) = response.body["items"]
    assert response.body["pools"] == response.body["items"]
    assert item["name"] == item["id"] == "default-workers"
    assert item["queues"] == ["default", "email"]
    assert item["weights"] == {"default": 3, "email": 2}
    assert (item["concurrency"], item["strategy"]) == (50, "weighted")
    assert item["active_workers"] == item["workers"] == 2
    assert item["active_jobs"] == 2
    assert item["starvation_prevention"]["enabled"] is False


def test_get_and_delete_one_pool(api):
    lifecycle.save_pool("p", ["a"])
    assert api.get(f"{P}/p").body["pool"]["queues"] == ["a"]
    assert api.delete(f"{P}/p").status_code == 204
    assert_ojs_error(api.get(f"{P}/p"), 404, "not_found")
    assert_ojs_error(api.delete(f"{P}/p"), 404, "not_found")


def test_pools_need_the_admin_scope_over_every_queue(db):
    assert_ojs_error(client("worker").get(P), 403)
    from django_ojs import apikeys
    from tests.integration.api_support import OJSClient

    limited = OJSClient(apikeys.create("lim", "admin", queues=["a"])[1])
    assert_ojs_error(limited.get(P), 403)
    assert_ojs_error(limited.get("/admin/scheduling/stats"), 403)


def test_scheduling_stats(api):
    lifecycle.save_pool("mixed", ["bulk", "mail"], strategy="weighted",
                        weights={"bulk": 3, "mail": 1})  # fmt: skip
    fill("bulk", 10)
    fill("mail", 10)
    fill("idle", 1)
    lifecycle.PoolFetch("mixed")(8)
    response = api.get("/admin/scheduling/stats")
    assert response.status_code == 200
    body = response.body
    assert body["window"] == "PT1M"
    assert body["strategy"] == "weighted"
    assert body["stats"]["dispatch_count_1m"] == 8
    rows = {q["name"]: q for q in body["queues"]}
    assert set(rows) == {"bulk", "mail"}  # the pools' queues and those dispatched from
    assert (rows["bulk"]["dispatch_count_1m"], rows["mail"]["dispatch_count_1m"]) == (6, 2)
    assert rows["bulk"]["dispatched"] == 6
    assert rows["bulk"]["dispatch_ratio_1m"] == 0.75
    assert rows["bulk"]["active_jobs"] == 6
    assert rows["bulk"]["available"] == 4
    assert rows["bulk"]["weight"] == 3
    assert isinstance(rows["bulk"]["avg_wait_ms"], int)
    assert rows["mail"]["starved"] is False


def test_scheduling_stats_without_pools(api):
    body = api.get("/admin/scheduling/stats").body
    assert body["queues"] == []
    assert body["strategy"] == "strict"
    assert body["stats"]["dispatch_count_1m"] == 0


# ------------------------------------------------------------------ ojs_worker --pool


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "missing"], "Worker pool 'missing' not found"),
        (["--pool", "p", "--queues", "a"], "leave out --queues"),
        (["--pool", "threads", "--execution", "processes"], "contradicts"),
    ],
)
def test_ojs_worker_refuses_a_pool_it_cannot_join(args, message):
    from django.core.management import CommandError, call_command

    lifecycle.save_pool("p", ["a"])
    with pytest.raises(CommandError, match=message):
        call_command("ojs_worker", *args)


def test_a_superusers_session_reads_pools_as_the_official_admin_ui_does(admin_user):
    from tests.integration.api_support import OJSClient

    lifecycle.save_pool("mail-workers", ["email"])
    api = OJSClient()
    api.client.force_login(admin_user)
    response = api.get(P)
    assert response.status_code == 200
    assert [p["name"] for p in response.body["pools"]] == ["mail-workers"]
    assert api.get("/admin/scheduling/stats").body["queues"][0]["name"] == "email"


def test_a_starved_queue_is_reported_when_rotation_serves_it():
    fetch, now = starving_pool()
    assert claimed_queues(fetch(3)) == {"critical": 3}
    assert not Event.objects.filter(type="scheduling.queue_starved").exists()
    now[0] += 45
    assert claimed_queues(fetch(3)) == {"low": 1, "critical": 2}
    (event,) = Event.objects.filter(type="scheduling.queue_starved")
    assert (event.subject, event.queue) == ("low", "low")
    assert event.data["pool"] == "general"
    assert event.data["duration"] == "PT45S"
    assert event.data["available_count"] == 5
