"""Workflows through the lifecycle and the Python API (OJS workflows §4-§9)."""

from __future__ import annotations

import pytest
from django.db import transaction

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import InvalidTransition, ValidationError
from django_ojs.models import Job, Workflow
from django_ojs.states import JobState

pytestmark = pytest.mark.django_db(transaction=True)

job = django_ojs.job


def run(queue: str, result: object = None, *, worker: str = "w") -> Job:
    """Claim the next job of ``queue`` and complete it with ``result``."""
    (claimed,) = lifecycle.fetch([queue], worker_id=worker)
    return lifecycle.ack(claimed.id, result, worker_id=worker)


def fail_for_good(queue: str, *, worker: str = "w") -> Job:
    (claimed,) = lifecycle.fetch([queue], worker_id=worker)
    return lifecycle.fail(claimed.id, {"message": "boom", "retryable": False}, worker_id=worker)


def steps(workflow: Workflow) -> list[Job]:
    return list(workflow.jobs.order_by("workflow_step", "id"))


def test_chain_runs_in_order_and_passes_results():
    wf = django_ojs.chain(
        job("c.a", [1], queue="c"),
        job("c.b", [2], queue="c"),
        job("c.c", [3], queue="c"),
        name="pipeline",
    )
    assert [j.state for j in steps(wf)] == ["available", "pending", "pending"]
    first = run("c", {"n": 1})
    assert first.type == "c.a"
    (second,) = lifecycle.fetch(["c"], worker_id="w")
    assert second.type == "c.b"
    assert second.parent_results == [{"n": 1}]
    assert second.to_wire()["parent_results"] == [{"n": 1}]
    lifecycle.ack(second.id, "two", worker_id="w")
    (third,) = lifecycle.fetch(["c"], worker_id="w")
    assert third.parent_results == [{"n": 1}, "two"]
    lifecycle.ack(third.id, None, worker_id="w")
    wf.refresh_from_db()
    assert (wf.state, wf.completed, wf.total) == ("completed", 3, 3)
    assert wf.finished_at is not None


def test_failed_chain_step_cancels_the_rest():
    wf = django_ojs.chain(job("f.a", queue="f"), job("f.b", queue="f"), job("f.c", queue="f"))
    run("f")
    fail_for_good("f")
    assert lifecycle.fetch(["f"], worker_id="w") == []
    wf.refresh_from_db()
    assert wf.state == "failed"
    assert (wf.completed, wf.failed, wf.cancelled) == (1, 1, 1)
    assert wf.error["failed_step_index"] == 1
    assert wf.error["errors"][0]["message"] == "boom"
    assert [j.state for j in steps(wf)] == ["completed", "discarded", "cancelled"]


def test_retrying_the_failed_chain_step_resumes_the_chain():
    wf = django_ojs.chain(job("r.a", queue="r"), job("r.b", queue="r"), job("r.c", queue="r"))
    run("r", 1)
    failed = fail_for_good("r")
    lifecycle.retry_discarded(failed.id)
    wf.refresh_from_db()
    assert (wf.state, wf.failed, wf.cancelled) == ("running", 0, 0)
    again = run("r", 2)
    assert again.id == failed.id
    (last,) = lifecycle.fetch(["r"], worker_id="w")
    assert last.type == "r.c" and last.parent_results == [1, 2]
    lifecycle.ack(last.id, 3, worker_id="w")
    wf.refresh_from_db()
    assert (wf.state, wf.completed) == ("completed", 3)


def test_group_completes_or_records_partial_failure():
    ok = django_ojs.group(job("g.a", queue="g"), job("g.b", queue="g"))
    assert [j.state for j in steps(ok)] == ["available", "available"]
    run("g")
    run("g")
    ok.refresh_from_db()
    assert (ok.state, ok.completed) == ("completed", 2)

    partial = django_ojs.group(
        [job("p.a", queue="p"), job("p.b", queue="p"), job("p.c", queue="p")]
    )
    run("p")
    fail_for_good("p")
    partial.refresh_from_db()
    assert partial.state == "running"  # §9.3: waits for every member
    run("p")
    partial.refresh_from_db()
    assert (partial.state, partial.completed, partial.failed) == ("failed", 2, 1)


@pytest.mark.parametrize(
    ("fail", "fired"),
    [(False, {"on_complete", "on_success"}), (True, {"on_complete", "on_failure"})],
)
def test_batch_fires_the_callbacks_of_the_matrix_once(fail, fired):
    wf = django_ojs.batch(
        job("b.a", queue="b"),
        job("b.b", queue="b"),
        on_complete=job("b.done", queue="cb-complete"),
        on_success=job("b.ok", queue="cb-success"),
        on_failure=job("b.ko", queue="cb-failure"),
    )
    run("b", {"i": 0})
    if fail:
        fail_for_good("b")
    else:
        run("b", {"i": 1})
    wf.refresh_from_db()
    assert set(wf.fired) == fired
    for name in ("on_complete", "on_success", "on_failure"):
        claimed = lifecycle.fetch([f"cb-{name.removeprefix('on_')}"], worker_id="cb")
        assert len(claimed) == (1 if name in fired else 0)
        if claimed:
            expected = [{"i": 0}, None] if fail else [{"i": 0}, {"i": 1}]
            assert claimed[0].parent_results == expected
            lifecycle.ack(claimed[0].id, None, worker_id="cb")
    wf.refresh_from_db()
    assert wf.state == "completed"
    assert (wf.completed, wf.failed) == ((1, 1) if fail else (2, 0))


def test_failed_callback_fails_the_batch():
    wf = django_ojs.batch(
        job("bf.a", queue="bf"),
        on_complete=job("bf.done", queue="bf-cb", retry={"max_attempts": 1}),
    )
    run("bf")
    fail_for_good("bf-cb")
    wf.refresh_from_db()
    assert wf.state == "failed"
    assert wf.error["errors"][0]["callback"] == "on_complete"


def test_cancel_workflow_cancels_waiting_and_running_jobs():
    wf = django_ojs.chain(job("x.a", queue="x"), job("x.b", queue="x"))
    (active,) = lifecycle.fetch(["x"], worker_id="w")
    cancelled = lifecycle.cancel_workflow(wf.id)
    assert cancelled.state == "cancelled"
    assert {j.state for j in steps(wf)} == {JobState.CANCELLED}
    with pytest.raises(InvalidTransition):
        lifecycle.ack(active.id, None, worker_id="w")
    assert lifecycle.cancel_workflow(wf.id).state == "cancelled"  # idempotent


def test_finished_workflow_refuses_cancel():
    wf = django_ojs.group(job("d.a", queue="d"))
    run("d")
    with pytest.raises(InvalidTransition):
        lifecycle.cancel_workflow(wf.id)


def test_workflow_rolls_back_with_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        django_ojs.chain(job("t.a"), job("t.b"))
        raise RuntimeError
    assert not Workflow.objects.exists()
    assert not Job.objects.filter(type__startswith="t.").exists()


def test_ack_many_advances_workflows():
    wf = django_ojs.batch(
        [job("m.x", queue="m") for _ in range(5)], on_complete=job("m.done", queue="m-cb")
    )
    plain = django_ojs.enqueue("m.plain", queue="m")
    claimed = lifecycle.fetch(["m"], count=10, worker_id="w")
    assert len(claimed) == 6
    done = lifecycle.ack_many([(j.id, j.attempt, j.type) for j in claimed], worker_id="w")
    assert set(done) == {j.id for j in claimed}
    wf.refresh_from_db()
    assert (wf.completed, wf.fired) == (5, ["on_complete"])
    assert Job.objects.get(pk=plain.id).state == "completed"
    assert len(lifecycle.fetch(["m-cb"], worker_id="w")) == 1


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("batch", {}),  # a batch needs a callback
        ("chain", {}),  # with no steps
    ],
)
def test_invalid_workflows_are_refused(kind, kwargs):
    with pytest.raises(ValidationError):
        if kind == "batch":
            django_ojs.batch(job("v.a"))
        else:
            django_ojs.chain()


def test_reaper_failures_and_expiry_move_the_workflow():
    from datetime import timedelta

    from django.utils import timezone

    lost = django_ojs.chain(
        job("l.a", queue="l", visibility_timeout=1, retry={"max_attempts": 1}),
        job("l.b", queue="l"),
    )
    lifecycle.fetch(["l"], worker_id="w")
    lifecycle.rescue_expired(now=timezone.now() + timedelta(seconds=2))
    lost.refresh_from_db()
    assert (lost.state, lost.failed, lost.cancelled) == ("failed", 1, 1)

    stale = django_ojs.group(job("s.a", queue="s", expires_at=timedelta(seconds=1)))
    lifecycle.expire_stale(now=timezone.now() + timedelta(seconds=2))
    stale.refresh_from_db()
    assert (stale.state, stale.failed) == ("failed", 1)


def test_cancelling_a_member_job_fails_the_chain():
    wf = django_ojs.chain(job("k.a", queue="k"), job("k.b", queue="k"))
    first = Job.objects.get(workflow=wf, workflow_step=0)
    lifecycle.cancel(first.id)
    wf.refresh_from_db()
    assert (wf.state, wf.cancelled) == ("failed", 2)
    assert wf.error["failed_step_index"] == 0
