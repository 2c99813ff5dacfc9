"""Workflow endpoints (HB §14, workflows §11): every request shape, both response forms."""

from __future__ import annotations

import pytest

from django_ojs.models import Job, Workflow
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


def work(api, queue, result=None, *, fail=False):
    fetched = api.post("/workers/fetch", {"queues": [queue], "worker_id": "w"}).body["jobs"]
    assert fetched, f"nothing to fetch in {queue}"
    job = fetched[0]
    if fail:
        error = {"code": "handler_error", "message": "no", "retryable": False}
        api.post("/workers/nack", {"job_id": job["id"], "worker_id": "w", "error": error})
    else:
        api.post("/workers/ack", {"job_id": job["id"], "worker_id": "w", "result": result})
    return job


def test_chain__create_get_and_parent_results(api):
    body = {
        "type": "chain",
        "name": "order",
        "steps": [
            {"type": "o.charge", "args": [1], "options": {"queue": "o"}},
            {"type": "o.ship", "args": [1], "options": {"queue": "o"}},
        ],
    }
    created = api.post("/workflows", body)
    assert created.status_code == 201
    wf = created.body["workflow"]
    assert created["Location"] == f"/ojs/v1/workflows/{wf['id']}"
    assert (wf["type"], wf["state"], wf["steps_total"], wf["steps_completed"]) == (
        "chain", "running", 2, 0,
    )  # fmt: skip
    assert [s["state"] for s in wf["steps"]] == ["available", "pending"]
    assert [s["index"] for s in wf["steps"]] == [0, 1]
    assert wf["metadata"]["job_count"] == 2
    work(api, "o", {"tracking": "T1"})
    second = work(api, "o", "shipped")
    assert second["parent_results"] == [{"tracking": "T1"}]
    assert second["workflow_id"] == wf["id"]
    got = api.get(f"/workflows/{wf['id']}").body["workflow"]
    assert (got["state"], got["steps_completed"]) == ("completed", 2)
    assert got["steps"][0]["result"] == {"tracking": "T1"}
    assert got["completed_at"]


def test_batch__callbacks_in_the_response_and_fired(api):
    body = {
        "type": "batch",
        "jobs": [{"type": "b.x", "args": [], "options": {"queue": "b"}}],
        "callbacks": {
            "on_success": {"type": "b.ok", "args": [], "options": {"queue": "b-cb"}},
            "on_failure": {"type": "b.ko", "args": [], "options": {"queue": "b-cb"}},
        },
    }
    wf = api.post("/workflows", body).body["workflow"]
    assert (wf["jobs_total"], wf["jobs_completed"]) == (1, 0)
    assert wf["callbacks"]["on_success"]["state"] == "pending"
    work(api, "b", 7)
    got = api.get(f"/workflows/{wf['id']}").body["workflow"]
    assert got["callbacks_fired"] == ["on_success"]
    assert got["callbacks"]["on_success"]["state"] == "available"
    assert got["callbacks"]["on_failure"]["state"] == "cancelled"
    callback = work(api, "b-cb")
    assert callback["type"] == "b.ok" and callback["parent_results"] == [7]
    assert api.get(f"/workflows/{wf['id']}").body["workflow"]["state"] == "completed"


def test_binding_shape__dependencies_make_a_chain_or_a_group(api):
    chain = {
        "name": "onboarding",
        "steps": [
            {"id": "a", "type": "u.a", "args": [], "depends_on": []},
            {"id": "b", "type": "u.b", "args": [], "depends_on": ["a"]},
        ],
        "options": {"queue": "u"},
    }
    wf = api.post("/workflows", chain).body["workflow"]
    assert wf["type"] == "chain"
    assert {j.queue for j in Job.objects.filter(workflow_id=wf["id"])} == {"u"}
    group = {"name": "g", "steps": [{"id": "a", "type": "u.a", "args": [], "depends_on": []}]}
    assert api.post("/workflows", group).body["workflow"]["type"] == "group"
    dag = {
        "name": "dag",
        "steps": [
            {"id": "a", "type": "u.a", "args": [], "depends_on": []},
            {"id": "b", "type": "u.b", "args": [], "depends_on": []},
            {"id": "c", "type": "u.c", "args": [], "depends_on": ["a", "b"]},
        ],
    }
    assert_ojs_error(api.post("/workflows", dag), 400)


@pytest.mark.parametrize(
    "body",
    [
        {"type": "chain", "steps": []},
        {"type": "tree", "jobs": [{"type": "a", "args": []}]},
        {"type": "batch", "jobs": [{"type": "a", "args": []}]},  # no callbacks
        {"type": "group", "jobs": [{"type": "a", "args": []}], "callbacks": {"on_x": {}}},
        {"type": "group", "jobs": [{"args": []}]},
        {"type": "group", "jobs": ["a"]},
        {"type": "group", "jobs": [{"type": "a", "args": []}], "name": 5},
    ],
)
def test_create__bad_input_is_a_400_and_writes_nothing(api, body):
    assert_ojs_error(api.post("/workflows", body), 400)
    assert not Workflow.objects.exists() and not Job.objects.exists()


def test_cancel__200_then_409_and_404s(api):
    body = {"type": "group", "jobs": [{"type": "c.a", "args": [], "options": {"queue": "c"}}]}
    wf = api.post("/workflows", body).body["workflow"]
    cancelled = api.delete(f"/workflows/{wf['id']}")
    assert cancelled.status_code == 200
    assert cancelled.body["workflow"]["state"] == "cancelled"
    assert cancelled.body["workflow"]["steps"][0]["state"] == "cancelled"
    assert_ojs_error(api.delete(f"/workflows/{wf['id']}"), 409, "conflict")
    assert_ojs_error(api.get("/workflows/not-a-uuid"), 404)
    assert_ojs_error(api.get("/workflows/0190f0f0-0000-7000-8000-000000000000"), 404)


def test_scopes__producer_creates_worker_cannot(db):
    body = {"type": "group", "jobs": [{"type": "s.a", "args": []}]}
    assert client("producer").post("/workflows", body).status_code == 201
    assert_ojs_error(client("worker").post("/workflows", body), 403)
    wf = Workflow.objects.get()
    assert_ojs_error(client("producer").get(f"/workflows/{wf.id}"), 403)
    assert client("operator").delete(f"/workflows/{wf.id}").status_code == 200
