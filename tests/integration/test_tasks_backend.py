"""Django's task framework on OJS (``django_ojs.tasks.OJSBackend``), on Django 6.x
(``django.tasks``) and on Django 5.2 with the ``django-tasks`` backport: enqueue in the
caller's transaction, options, results, signals and the worker side."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.context import JobContext
from django_ojs.models import Job
from django_ojs.registry import registry
from django_ojs.tasks import OJSBackend, resolve_task, tasks_api
from django_ojs.worker import execution
from tests.taskapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)
Status = tasks_api.Status


def run_next(queue: str = "default"):
    """What ojs_worker does with the next job of ``queue``: the registry's handler."""
    (claimed,) = lifecycle.fetch([queue], worker_id="w-1")
    handler = registry.get(claimed.type)
    assert handler is not None, claimed.type
    ctx = JobContext(claimed.to_wire(), attempt=claimed.attempt, worker_id="w-1")
    outcome = execution.run(handler, list(claimed.args), ctx)
    if outcome.ok:
        return lifecycle.ack(claimed.id, outcome.result, worker_id="w-1")
    return lifecycle.fail(claimed.id, outcome.error, worker_id="w-1")


def test_backend_capabilities_and_job_shape():
    backend = tasks_api.task_backends["default"]
    assert isinstance(backend, OJSBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority
    result = tasks.add.enqueue(2, b=3)
    job = Job.objects.get(pk=result.id)
    assert job.type == "tests.taskapp.tasks.add"
    assert job.args == [{"args": [2], "kwargs": {"b": 3}}]
    assert (job.queue, job.priority, job.timeout_ms) == ("default", 0, 60_000)
    assert job.meta["django_task"] == {"backend": "default"}
    assert result.status == Status.READY and result.args == [2] and result.kwargs == {"b": 3}


def test_enqueue_rolls_back_with_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1)
        raise RuntimeError
    assert not Job.objects.exists()
    with transaction.atomic():
        result = tasks.add.enqueue(1, 1)
    assert Job.objects.filter(pk=result.id).exists()


def test_run_then_get_result_is_successful_with_its_return_value():
    result = tasks.add.enqueue(20, b=22)
    run_next()
    got = tasks.add.get_result(result.id)
    assert got.status == Status.SUCCESSFUL and got.return_value == 42
    assert got.is_finished and got.attempts == 1 and got.worker_ids == ["w-1"]
    assert got.finished_at is not None and got.started_at is not None
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value == 42


def test_failing_task_retries_then_ends_failed_with_its_error():
    result = tasks.always_fails.enqueue("card declined")
    first = run_next()
    assert first.state == "retryable"
    assert tasks.always_fails.get_result(result.id).status == Status.READY  # will run again
    Job.objects.filter(pk=result.id).update(next_attempt_at=timezone.now())
    lifecycle.promote_due()
    last = run_next()
    assert last.state == "discarded"
    got = tasks.always_fails.get_result(result.id)
    assert got.status == Status.FAILED and got.attempts == 2
    assert got.errors and got.errors[-1].exception_class_path == "builtins.ValueError"
    assert got.errors[-1].exception_class is ValueError
    assert "card declined" in got.errors[-1].traceback
    with pytest.raises(ValueError):
        got.return_value  # noqa: B018 - Django raises for a failed task


def test_run_after_priority_queue_and_context():
    later = timezone.now() + timedelta(hours=1)
    deferred = tasks.add.using(run_after=later).enqueue(1)
    job = Job.objects.get(pk=deferred.id)
    assert job.state == "scheduled" and job.scheduled_at == later
    urgent = tasks.urgent.enqueue("now")
    assert Job.objects.get(pk=urgent.id).priority == 50
    assert Job.objects.get(pk=urgent.id).queue == "tasks"
    low = tasks.urgent.using(priority=-10).enqueue("later")
    # Higher priority first (both scales are -100..100).
    assert run_next("tasks").id == Job.objects.get(pk=urgent.id).id
    assert run_next("tasks").id == Job.objects.get(pk=low.id).id
    ctx_result = tasks.with_context.enqueue(7)
    run_next()
    value = tasks.with_context.get_result(ctx_result.id).return_value
    assert value == {"attempt": 1, "id": ctx_result.id, "n": 7}


def test_an_invalid_queue_or_option_is_refused_before_writing():
    with pytest.raises(tasks_api.InvalidTask):
        tasks.add.using(queue_name="nowhere").enqueue(1)
    with pytest.raises(tasks_api.InvalidTask):
        tasks.add.enqueue(object())  # not JSON
    assert not Job.objects.exists()


def test_signals_fire_on_enqueue_start_and_finish():
    seen: list[tuple[str, str]] = []

    def record(name):
        def receiver(sender, task_result, **kwargs):
            seen.append((name, task_result.status))

        return receiver

    receivers = {
        "enqueued": record("enqueued"),
        "started": record("started"),
        "finished": record("finished"),
    }
    tasks_api.task_enqueued.connect(receivers["enqueued"])
    tasks_api.task_started.connect(receivers["started"])
    tasks_api.task_finished.connect(receivers["finished"])
    try:
        tasks.add.enqueue(1)
        run_next()
        tasks.always_fails.enqueue("x")
        run_next()  # attempt 1 of 2: not finished
    finally:
        tasks_api.task_enqueued.disconnect(receivers["enqueued"])
        tasks_api.task_started.disconnect(receivers["started"])
        tasks_api.task_finished.disconnect(receivers["finished"])
    assert seen == [
        ("enqueued", Status.READY), ("started", Status.RUNNING),
        ("finished", Status.SUCCESSFUL),
        ("enqueued", Status.READY), ("started", Status.RUNNING),
    ]  # fmt: skip


def test_aenqueue_and_async_tasks():
    from asgiref.sync import sync_to_async
    from django.db import connections

    try:
        result = asyncio.run(tasks.async_double.aenqueue(21))
        run_next()
        got = asyncio.run(tasks.async_double.aget_result(result.id))
    finally:
        # aenqueue ran in asgiref's thread for sync code: close its connection there.
        asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())
    assert got.status == Status.SUCCESSFUL and got.return_value == 42


def test_unknown_results_and_types_that_are_not_tasks():
    with pytest.raises(tasks_api.TaskResultDoesNotExist):
        tasks.add.get_result("01960000-0000-7000-8000-000000000000")
    with pytest.raises(tasks_api.TaskResultDoesNotExist):
        tasks.add.get_result("not-an-id")
    # Only Task objects of installed apps resolve: job data cannot import anything else.
    assert resolve_task("os.system") is None
    assert resolve_task("tests.taskapp.tasks.task") is None  # the decorator, not a Task
    assert resolve_task("django_ojs.models.Job") is None
    assert resolve_task("tests.taskapp.tasks.add") is tasks.add


def test_wait_blocks_until_the_task_finishes_then_refreshes():
    import threading

    from django.db import connections

    from django_ojs import tasks as ojs_tasks
    from django_ojs.exceptions import WaitTimeout

    result = tasks.add.enqueue(1, b=1)
    with pytest.raises(WaitTimeout):
        ojs_tasks.wait(result, timeout=0.05)
    go = threading.Event()

    def worker():
        try:
            go.wait(30)
            run_next()
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    threading.Timer(0.2, go.set).start()
    assert ojs_tasks.wait(result, timeout=60) is result
    thread.join(30)
    assert result.status == Status.SUCCESSFUL and result.return_value == 2
