"""Queue endpoints (HB §11) and pagination of lists (HB §17)."""

from __future__ import annotations

import pytest

from django_ojs.models import Queue
from tests.factories import JobFactory, QueueFactory
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


def test_list__includes_default_even_when_empty(api):
    body = api.get("/queues").body
    assert [q["name"] for q in body["queues"]] == ["default"]
    assert body["queues"][0]["status"] == "active" and body["queues"][0]["paused"] is False
    assert body["pagination"] == {
        "total": 1, "limit": 50, "offset": 0, "has_more": False, "page": 1, "per_page": 50,
    }  # fmt: skip


def test_list__queues_appear_on_first_enqueue_and_show_pause_state(api):
    api.enqueue("a.b", [], queue="email")
    api.post("/queues/reports/pause")
    queues = {q["name"]: q for q in api.get("/queues").body["queues"]}
    assert set(queues) == {"default", "email", "reports"}
    assert queues["reports"]["status"] == "paused" and queues["reports"]["paused_at"]
    assert queues["email"]["status"] == "active" and queues["email"]["created_at"]


def test_list__pagination_with_limit_and_cursor(api):
    for i in range(5):
        QueueFactory(name=f"q{i}")
    first = api.get("/queues?limit=2").body
    assert [q["name"] for q in first["queues"]] == ["default", "q0"]
    assert first["pagination"]["has_more"] is True and first["pagination"]["total"] == 6
    second = api.get(f"/queues?limit=2&cursor={first['pagination']['next_cursor']}").body
    assert [q["name"] for q in second["queues"]] == ["q1", "q2"]
    third = api.get("/queues?limit=2&offset=4").body
    assert [q["name"] for q in third["queues"]] == ["q3", "q4"]
    assert third["pagination"]["has_more"] is False and "next_cursor" not in third["pagination"]


def test_list__limit_is_clamped_to_200(api):
    assert api.get("/queues?limit=5000").body["pagination"]["limit"] == 200


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "offset=-1", "cursor=%%%"])
def test_list__bad_pagination_is_400_invalid_request(api, query):
    assert_ojs_error(api.get(f"/queues?{query}"), 400, "invalid_request")


def test_stats__counts_by_state(api):
    JobFactory.create_batch(2, queue="email")
    JobFactory(queue="email", active=True)
    JobFactory(queue="email", completed=True)
    JobFactory(queue="other")
    body = api.get("/queues/email/stats").body
    assert body["queue"]["name"] == "email" and body["name"] == "email"
    assert (body["queue"]["available"], body["queue"]["active"], body["queue"]["completed"]) == (
        2,
        1,
        1,
    )
    assert body["stats"]["available"] == 2 and body["stats"]["depth"] == 2
    assert body["stats"]["total"] == 4 and body["status"] == "active" and body["computed_at"]


def test_stats__default_queue_exists_without_jobs(api):
    assert api.get("/queues/default/stats").body["queue"]["available"] == 0


def test_stats__unknown_queue_is_404(api):
    error = assert_ojs_error(api.get("/queues/nowhere/stats"), 404, "not_found")
    assert error["details"]["resource_type"] == "queue"


def test_detail__state_config_and_stats(api):
    JobFactory.create_batch(2, queue="email")
    JobFactory(queue="email", active=True)
    JobFactory(queue="email", retryable=True)
    config = {"concurrency": 3, "retention": {"completed": "P2D"}}
    assert api.request("PUT", "/queues/email/config", config).status_code == 200
    api.post("/queues/email/pause")
    response = api.get("/queues/email")
    assert response.status_code == 200
    body = response.body
    assert body["name"] == "email" and body["state"] == "paused" and body["created_at"]
    assert body["config"] == api.get("/queues/email/config").body["config"]
    assert body["config"]["limits"] == {"concurrency": 3}
    assert body["config"]["retention"]["completed"] == "P2D"
    stats = body["stats"]
    assert (stats["depth"], stats["available"], stats["active"], stats["retryable"]) == (2, 2, 1, 1)
    assert stats["scheduled"] == 0 and stats["total"] == 4
    # The same queue under "queue", as the other queue endpoints answer.
    assert body["queue"]["name"] == "email" and body["queue"]["state"] == "paused"
    assert body["queue"]["config"] == body["config"] and body["queue"]["stats"] == stats
    assert body["status"] == "paused" and body["paused"] is True


def test_detail__default_queue_exists_and_an_active_one_says_so(api):
    body = api.get("/queues/default").body
    assert body["state"] == "active" and body["stats"]["total"] == 0
    assert body["queue"]["name"] == "default"


def test_detail__unknown_queue_is_404_and_a_bad_name_400(api):
    error = assert_ojs_error(api.get("/queues/nowhere"), 404, "not_found")
    assert error["details"] == {"resource_type": "queue", "resource_id": "nowhere"}
    assert_ojs_error(api.get("/queues/Bad!"), 400, "invalid_payload")


def test_detail__does_not_shadow_the_sub_resources(api):
    JobFactory(queue="email")
    assert "config" not in api.get("/queues/email/stats").body
    assert "stats" not in api.get("/queues/email/config").body
    assert api.post("/queues/email/pause").body["status"] == "paused"


def test_pause_and_resume(api):
    paused = api.post("/queues/email/pause")
    assert paused.status_code == 200
    assert paused.body["queue"] == {
        "name": "email",
        "status": "paused",
        "paused": True,
        "created_at": paused.body["queue"]["created_at"],
        "paused_at": paused.body["paused_at"],
    }
    assert Queue.objects.get(name="email").paused is True
    resumed = api.post("/queues/email/resume").body
    assert resumed["queue"]["paused"] is False and resumed["status"] == "active"
    assert resumed["resumed_at"]
    assert Queue.objects.get(name="email").paused is False


def test_pause__is_idempotent(api):
    api.post("/queues/email/pause")
    assert api.post("/queues/email/pause").body["queue"]["paused"] is True


def test_pause__invalid_queue_name_is_400(api):
    error = assert_ojs_error(api.post("/queues/Bad!/pause"), 400, "invalid_payload")
    assert error["details"]["field"] == "queue"
