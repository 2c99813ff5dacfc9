"""Results (OJS results extension): waiting that wakes on completion, result TTL and
pruning (410), bulk retrieval, and the HTTP endpoints' answers."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import JobNotFound, ResultPruned, ValidationError, WaitTimeout
from django_ojs.models import Job
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db(transaction=True)


def finish_later(job_id, *, after: threading.Event, result=None, fail=False):
    """Complete (or fail for good) ``job_id`` from another thread once ``after`` is set."""

    def body():
        from django.db import connections

        try:
            after.wait(30)
            (claimed,) = lifecycle.fetch(["res"], worker_id="w")
            assert claimed.id == job_id
            if fail:
                lifecycle.fail(claimed.id, {"message": "no", "retryable": False}, worker_id="w")
            else:
                lifecycle.ack(claimed.id, result, worker_id="w")
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_wait_returns_once_the_job_finishes():
    job = django_ojs.enqueue("r.work", queue="res")
    go = threading.Event()
    thread = finish_later(job.id, after=go, result={"total": 3})
    # The waiter is registered before the job finishes: it must be woken, not time out.
    timer = threading.Timer(0.3, go.set)
    timer.start()
    began = time.monotonic()
    done = django_ojs.wait(job.id, timeout=60)
    thread.join(30)
    assert (done.state, done.result) == ("completed", {"total": 3})
    assert time.monotonic() - began < 30  # woken by the completion, not the timeout


def test_wait_on_a_finished_job_returns_at_once_and_errors_are_typed():
    job = django_ojs.enqueue("r.work", queue="res")
    go = threading.Event()
    go.set()
    finish_later(job.id, after=go, fail=True).join(30)
    done = django_ojs.wait(job.id, timeout=0)
    assert done.state == "discarded" and done.error["message"] == "no"
    with pytest.raises(WaitTimeout) as caught:
        django_ojs.wait(django_ojs.enqueue("r.slow", queue="res").id, timeout=0.05)
    assert caught.value.details["state"] == "available"
    with pytest.raises(JobNotFound):
        django_ojs.wait("01960000-0000-7000-8000-000000000000", timeout=0)
    with pytest.raises(ValidationError):
        django_ojs.wait(job.id, timeout=-1)


def test_result_ttl_option_envelope_fields_and_pruning():
    job = django_ojs.enqueue("r.ttl", queue="res", result_ttl=60)
    forever = django_ojs.enqueue("r.keep", queue="res", result_ttl=-1)
    plain = django_ojs.enqueue("r.plain", queue="res")
    for _ in range(3):
        (claimed,) = lifecycle.fetch(["res"], worker_id="w")
        lifecycle.ack(claimed.id, {"of": claimed.type}, worker_id="w")
    wire = Job.objects.get(pk=job.pk).to_wire()
    assert wire["result_ttl"] == 60 and wire["result_stored_at"]
    assert wire["result_expires_at"] > wire["result_stored_at"]
    assert Job.objects.get(pk=forever.pk).to_wire()["result_ttl"] == -1
    assert "result_expires_at" not in Job.objects.get(pk=forever.pk).to_wire()
    assert "result_expires_at" in Job.objects.get(pk=plain.pk).to_wire()  # OJS_RESULT_TTL
    later = timezone.now() + timedelta(seconds=120)
    assert lifecycle.prune_results(later) == 1  # only the 60 s one
    pruned = Job.objects.get(pk=job.pk)
    assert pruned.result is None and pruned.result_pruned_at is not None
    with pytest.raises(ResultPruned):
        lifecycle.result_outcome(pruned)
    assert lifecycle.result_outcome(Job.objects.get(pk=plain.pk))["result"] == {"of": "r.plain"}
    much_later = timezone.now() + timedelta(days=30)
    assert lifecycle.prune_results(much_later) == 1  # the default TTL; never the permanent one
    # Retention keeps a job whose result_ttl reaches further than the completed retention.
    Job.objects.update(completed_at=timezone.now() - timedelta(days=30))
    lifecycle.prune(completed_before=timezone.now() - timedelta(days=7))
    assert list(Job.objects.values_list("type", flat=True)) == ["r.keep"]


@pytest.mark.parametrize("value", ["60", 1.5, -2, True, 10**10])
def test_bad_result_ttl_is_refused(value):
    with pytest.raises(ValidationError) as caught:
        django_ojs.enqueue("r.bad", result_ttl=value)
    assert caught.value.field == "result_ttl"


def test_bulk_results():
    done = django_ojs.enqueue("r.a", queue="res")
    waiting = django_ojs.enqueue("r.b", queue="other")
    (claimed,) = lifecycle.fetch(["res"], worker_id="w")
    lifecycle.ack(claimed.id, 7, worker_id="w")
    unknown = "01960000-0000-7000-8000-000000000000"
    out = lifecycle.results([str(done.id), str(waiting.id), unknown])
    assert out == {
        str(done.id): {"state": "completed", "result": 7},
        str(waiting.id): {"state": "available", "result": None},
        unknown: {"state": None, "result": None},
    }
    with pytest.raises(ValidationError):
        lifecycle.results([])
    with pytest.raises(ValidationError):
        lifecycle.results(["nope"])


# ----------------------------------------------------------------------------- HTTP


def test_http_result_wait_and_errors(db):
    api = client("admin")
    job = api.enqueue("r.http", [], queue="res")
    pending = api.get(f"/jobs/{job['id']}/result")
    assert pending.status_code == 200 and pending["Retry-After"] == "1"
    assert pending.body == {"job_id": job["id"], "state": "available", "result": None}
    assert_ojs_error(api.get(f"/jobs/{job['id']}/result?wait=true&timeout=0.05"), 408, "timeout")
    go = threading.Event()
    thread = finish_later(Job.objects.get(pk=job["id"]).id, after=go, result=[1, 2])
    threading.Timer(0.2, go.set).start()
    waited = api.get(f"/jobs/{job['id']}/result?wait=true&timeout=30")
    thread.join(30)
    assert waited.status_code == 200
    assert waited.body == {"job_id": job["id"], "state": "completed", "result": [1, 2]}
    Job.objects.filter(pk=job["id"]).update(result=None, result_pruned_at=timezone.now())
    assert_ojs_error(api.get(f"/jobs/{job['id']}/result"), 410, "result_pruned")
    unknown = "01960000-0000-7000-8000-000000000000"
    assert_ojs_error(api.get(f"/jobs/{unknown}/result"), 404)
    for bad in ("wait=maybe", "wait=true&timeout=-1", "wait=true&timeout=x", "wait=1&timeout=999"):
        assert_ojs_error(api.get(f"/jobs/{job['id']}/result?{bad}"), 400)
    bulk = api.post("/jobs/results", {"ids": [job["id"], unknown]})
    assert bulk.status_code == 200
    assert bulk.body["results"][unknown] == {"state": None, "result": None}
    assert bulk.body["results"][job["id"]]["result_pruned"] is True
    assert_ojs_error(api.post("/jobs/results", {"ids": "x"}), 400)
    created = api.post("/jobs", {"type": "r.opt", "args": [], "options": {"result_ttl": 5}})
    assert created.body["job"]["result_ttl"] == 5
    assert_ojs_error(api.post("/jobs", {"type": "r.opt", "args": [], "result_ttl": "5"}), 400)


@pytest.mark.postgresql
def test_postgresql_notifies_the_terminal_transition_of_an_awaited_job_only():
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    awaited = django_ojs.enqueue("r.n1", queue="res")
    other = django_ojs.enqueue("r.n2", queue="res")
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute("LISTEN ojs_finished")
        conn.execute("UPDATE ojs_job SET awaited = true WHERE id = %s", [awaited.id])
        for _ in range(2):
            (claimed,) = lifecycle.fetch(["res"], worker_id="w")
            lifecycle.ack(claimed.id, None, worker_id="w")
        payloads = [n.payload for n in conn.notifies(timeout=30, stop_after=1)]
        assert payloads == [str(awaited.id)]
        assert not list(conn.notifies(timeout=0.2))  # nothing for the job nobody awaited
    assert Job.objects.get(pk=other.pk).awaited is False
