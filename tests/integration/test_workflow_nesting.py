"""Nested workflows (OJS workflows §10): any primitive inside any other, state propagation,
data passing across levels, cancel, resume, limits, HTTP and pruning."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job, Workflow
from django_ojs.states import JobState
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db(transaction=True)

job = django_ojs.job
Chain, Group, Batch = django_ojs.Chain, django_ojs.Group, django_ojs.Batch


def run(queue: str, result: object = None) -> Job:
    (claimed,) = lifecycle.fetch([queue], worker_id="w")
    return lifecycle.ack(claimed.id, result, worker_id="w")


def fail_for_good(queue: str) -> Job:
    (claimed,) = lifecycle.fetch([queue], worker_id="w")
    return lifecycle.fail(claimed.id, {"message": "boom", "retryable": False}, worker_id="w")


def drain(queue: str) -> list[Job]:
    """Run every job of ``queue`` that is available, result = its type."""
    done = []
    while claimed := lifecycle.fetch([queue], worker_id="w"):
        done.append(lifecycle.ack(claimed[0].id, claimed[0].type, worker_id="w"))
    return done


def child(wf: Workflow, step: int) -> Workflow:
    return Workflow.objects.get(parent=wf, parent_step=step)


def test_chain_with_a_group_step_waits_for_the_whole_group():
    """§10.3: extract → group of 3 transforms → load; load sees all transform results."""
    wf = django_ojs.chain(
        job("etl.extract", queue="etl"),
        Group(
            job("t.a", queue="etl"),
            job("t.b", queue="etl"),
            job("t.c", queue="etl"),
            name="transforms",
        ),
        job("etl.load", queue="etl"),
        name="etl",
    )
    group = child(wf, 1)
    assert (group.state, group.depth, group.root_id, group.kind) == ("pending", 1, wf.id, "group")
    assert set(group.jobs.values_list("state", flat=True)) == {JobState.PENDING}
    run("etl", "raw")
    group.refresh_from_db()
    assert group.state == "running" and group.parent_results == ["raw"]
    members = drain("etl")[:3]
    assert sorted(m.type for m in members) == ["t.a", "t.b", "t.c"]
    assert all(m.parent_results == ["raw"] for m in members)
    # The drain also ran the load step, released when the group's last member finished.
    load = Job.objects.get(workflow=wf, type="etl.load")
    assert load.state == JobState.COMPLETED
    assert load.parent_results == ["raw", ["t.a", "t.b", "t.c"]]
    wf.refresh_from_db()
    group.refresh_from_db()
    assert (group.state, group.result) == ("completed", ["t.a", "t.b", "t.c"])
    assert (wf.state, wf.completed, wf.total) == ("completed", 3, 3)


def test_three_levels_chain_group_chains():
    """§10.2: a chain containing a group containing chains (the rationale's example)."""
    wf = django_ojs.chain(
        job("s.start", queue="n3"),
        Group(
            Chain(job("p1.a", queue="n3"), job("p1.b", queue="n3")),
            Chain(job("p2.a", queue="n3"), job("p2.b", queue="n3")),
        ),
        job("s.end", queue="n3"),
    )
    assert Workflow.objects.filter(root=wf).count() == 3
    assert set(Workflow.objects.filter(root=wf).values_list("depth", flat=True)) == {1, 2}
    order = [j.type for j in drain("n3")]
    assert order[0] == "s.start" and order[-1] == "s.end"
    assert order.index("p1.a") < order.index("p1.b")
    assert order.index("p2.a") < order.index("p2.b")
    end = Job.objects.get(workflow=wf, type="s.end")
    # Each inner chain hands on its last step's result; the group, both in member order.
    assert end.parent_results == ["s.start", ["p1.b", "p2.b"]]
    inner = Job.objects.get(type="p1.b")
    assert inner.parent_results == ["s.start", "p1.a"]
    wf.refresh_from_db()
    assert wf.state == "completed"
    assert set(Workflow.objects.filter(root=wf).values_list("state", flat=True)) == {"completed"}


def test_failed_nested_group_fails_the_chain_and_cancels_later_nested_steps():
    wf = django_ojs.chain(
        Group(job("g.ok", queue="nf"), job("g.bad", queue="nf2")),
        Batch(job("b.x", queue="nf"), on_complete=job("b.done", queue="nf")),
        job("after", queue="nf"),
    )
    run("nf")
    fail_for_good("nf2")
    wf.refresh_from_db()
    group, batch = child(wf, 0), child(wf, 1)
    assert (group.state, group.failed, group.completed) == ("failed", 1, 1)
    assert wf.state == "failed" and (wf.failed, wf.cancelled) == (1, 2)
    assert wf.error["failed_step_index"] == 0
    assert wf.error["errors"][0]["workflow_id"] == str(group.id)
    assert wf.error["failed_job_ids"] == [str(Job.objects.get(type="g.bad").id)]
    assert batch.state == "cancelled"
    assert set(batch.jobs.values_list("state", flat=True)) == {JobState.CANCELLED}
    assert Job.objects.get(type="after").state == JobState.CANCELLED
    assert lifecycle.fetch(["nf", "nf2"], worker_id="w") == []


def test_group_of_chains_records_partial_failure_and_batch_callbacks_see_nested_results():
    wf = django_ojs.batch(
        Chain(job("c1.a", queue="nb"), job("c1.b", queue="nb")),
        Group(job("g.a", queue="nb"), job("g.b", queue="nb")),
        on_success=job("cb.ok", queue="nbcb"),
        on_failure=job("cb.fail", queue="nbcb"),
    )
    drain("nb")
    (callback,) = lifecycle.fetch(["nbcb"], worker_id="w")
    assert callback.type == "cb.ok"
    assert callback.parent_results == ["c1.b", ["g.a", "g.b"]]
    lifecycle.ack(callback.id, None, worker_id="w")
    wf.refresh_from_db()
    assert (wf.state, wf.fired) == ("completed", ["on_success"])


def test_retrying_the_failed_step_of_a_nested_workflow_resumes_every_level():
    wf = django_ojs.chain(
        job("r.first", queue="nr"),
        Group(job("r.ok", queue="nr"), Chain(job("r.bad", queue="nr2"), job("r.next", queue="nr"))),
        Group(job("r.later", queue="nr")),
        job("r.last", queue="nr"),
    )
    run("nr", 1)
    run("nr", "ok")
    failed = fail_for_good("nr2")
    wf.refresh_from_db()
    assert wf.state == "failed"
    # The inner chain and the group around it failed; the group after them was cancelled.
    inner = Workflow.objects.get(root=wf, kind="chain")
    assert (inner.state, child(wf, 1).state, child(wf, 2).state) == (
        "failed", "failed", "cancelled",
    )  # fmt: skip
    lifecycle.retry_failed_steps(wf.id)
    wf.refresh_from_db()
    assert (wf.state, wf.failed, wf.cancelled, wf.error) == ("running", 0, 0, None)
    group = child(wf, 1)
    assert (group.state, group.failed) == ("running", 0)
    again = run("nr2", "fixed")
    assert again.id == failed.id
    order = [j.type for j in drain("nr")]
    assert order == ["r.next", "r.later", "r.last"]
    last = Job.objects.get(type="r.last", state=JobState.COMPLETED)
    assert last.parent_results == [1, ["ok", "r.next"], ["r.later"]]
    wf.refresh_from_db()
    assert wf.state == "completed"
    # The cancelled copy of step 2 stays as history beside the one that ran.
    assert Workflow.objects.filter(parent=wf, parent_step=2).count() == 2


def test_cancelling_the_outer_workflow_cancels_every_level():
    wf = django_ojs.group(
        Chain(job("x.a", queue="nc"), Group(job("x.b", queue="nc"), job("x.c", queue="nc"))),
        job("x.d", queue="nc"),
    )
    lifecycle.fetch(["nc"], worker_id="w")  # one member running
    lifecycle.cancel_workflow(wf.id)
    wf.refresh_from_db()
    assert (wf.state, wf.cancelled) == ("cancelled", 2)
    assert set(Workflow.objects.filter(root=wf).values_list("state", flat=True)) == {"cancelled"}
    states_ = set(Job.objects.filter(workflow__in=[wf, *wf.descendants.all()])
                  .values_list("state", flat=True))  # fmt: skip
    assert states_ == {JobState.CANCELLED}


def test_cancelling_a_nested_workflow_is_a_cancelled_member_of_its_parent():
    wf = django_ojs.group(Group(job("y.a", queue="ny")), job("y.b", queue="ny"))
    inner = child(wf, 0)
    lifecycle.cancel_workflow(inner.id)
    run("ny")
    wf.refresh_from_db()
    assert (wf.state, wf.cancelled, wf.completed) == ("failed", 1, 1)
    assert wf.error["errors"][0]["code"] == "workflow_cancelled"


def test_depth_limit_is_checked_at_creation_and_nothing_is_written():
    spec = job("deep.leaf", queue="nd")
    for _ in range(lifecycle.WORKFLOW_MAX_DEPTH):
        spec = Chain(spec)
    with pytest.raises(ValidationError) as caught:
        Group(spec).enqueue()
    assert "at most 5 levels" in caught.value.message
    assert caught.value.field == "jobs[0].steps[0].steps[0].steps[0].steps[0]"
    assert not Workflow.objects.exists() and not Job.objects.exists()
    # The deepest allowed tree is created.
    ok = job("deep.leaf", queue="nd")
    for _ in range(lifecycle.WORKFLOW_MAX_DEPTH - 1):
        ok = Chain(ok)
    Group(ok).enqueue()
    assert Workflow.objects.count() == lifecycle.WORKFLOW_MAX_DEPTH


def test_nested_workflow_rolls_back_with_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        django_ojs.chain(job("z.a", queue="nz"), Group(job("z.b", queue="nz")))
        raise RuntimeError
    assert not Workflow.objects.exists() and not Job.objects.exists()


def test_mappings_nest_too_and_an_existing_workflow_is_refused():
    wf = django_ojs.chain(
        {"type": "m.a", "queue": "nm"},
        {"type": "group", "jobs": [{"type": "m.b", "queue": "nm"}], "name": "inner"},
    )
    assert child(wf, 1).name == "inner"
    with pytest.raises(ValidationError, match="already exists"):
        django_ojs.chain(job("m.c", queue="nm"), wf)


def test_pruning_keeps_running_and_failed_workflows_and_deletes_old_finished_ones():
    done = django_ojs.chain(job("p.a", queue="np"), Group(job("p.b", queue="np")))
    drain("np")
    running = django_ojs.chain(job("p.c", queue="np"), job("p.d", queue="np"))
    run("np")
    failed = django_ojs.group(job("p.e", queue="np2"))
    fail_for_good("np2")
    later = timezone.now() + timedelta(days=1)
    out = lifecycle.prune(
        completed_before=later, cancelled_before=later, discarded_before=later,
        workflows_before=later,
    )  # fmt: skip
    assert out["workflows"] == 2  # the completed chain and its nested group
    assert not Workflow.objects.filter(pk=done.pk).exists()
    assert not Job.objects.filter(type__in=["p.a", "p.b"]).exists()
    # A running workflow's finished step stays: it is part of its graph.
    assert Job.objects.filter(workflow=running).count() == 2
    assert Job.objects.filter(workflow=failed).count() == 1
    out = lifecycle.prune(dead_letter_before=later, workflows_before=later)
    assert out["workflows"] == 1
    assert Workflow.objects.filter(pk=running.pk).exists()


# ----------------------------------------------------------------------------- HTTP


def test_http_nested_create_get_and_depth_error(db):
    api = client("admin")
    body = {
        "type": "chain",
        "name": "etl-pipeline",
        "options": {"queue": "nh"},
        "steps": [
            {"type": "data.extract", "args": [{"source": "api"}]},
            {
                "type": "group",
                "name": "parallel-transforms",
                "jobs": [
                    {"type": "transform.csv", "args": []},
                    {"type": "chain", "steps": [{"type": "t.json"}, {"type": "t.upload"}]},
                ],
            },
            {"type": "data.load", "args": [{"destination": "warehouse"}]},
        ],
    }
    created = api.post("/workflows", body)
    assert created.status_code == 201, created.body
    wf = created.body["workflow"]
    assert [s["type"] for s in wf["steps"]] == ["data.extract", "group", "data.load"]
    nested = wf["steps"][1]
    assert (nested["index"], nested["state"], nested["name"]) == (
        1, "pending", "parallel-transforms",
    )  # fmt: skip
    assert [m["type"] for m in nested["jobs"]] == ["transform.csv", "chain"]
    assert [s["type"] for s in nested["jobs"][1]["steps"]] == ["t.json", "t.upload"]
    assert wf["metadata"]["job_count"] == 5  # §3.3: nested jobs included
    assert Job.objects.filter(queue="nh").count() == 5  # workflow options reach nested jobs
    inner = api.get(f"/workflows/{nested['workflow_id']}").body["workflow"]
    assert inner["parent_workflow_id"] == wf["id"]

    deep: dict = {"type": "x.leaf"}
    for _ in range(6):
        deep = {"type": "chain", "steps": [deep]}
    resp = api.post("/workflows", deep)
    assert_ojs_error(resp, 400, "invalid_payload")
    assert "at most 5 levels" in resp.body["error"]["message"]
    bad = {"type": "group", "jobs": [{"type": "chain", "steps": []}]}
    error = assert_ojs_error(api.post("/workflows", bad), 400, "invalid_payload")
    assert error["details"]["field"] == "jobs[0].steps"
    assert Workflow.objects.count() == 3  # only the first request wrote anything
