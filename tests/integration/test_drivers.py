"""The driver contract, run against whichever database this run uses (both in CI)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

import django_ojs
from django_ojs.drivers import get_driver
from django_ojs.models import Job, Queue
from django_ojs.policy import configured


def claim(queue, limit, **kwargs):
    with transaction.atomic():
        return get_driver("default").claim(
            queue, limit, worker_id="w", now=timezone.now(), visibility_ms=None,
            defaults=configured(), **kwargs,
        )  # fmt: skip


@pytest.mark.django_db
def test_claim__orders_by_priority_then_fifo_and_respects_limit():
    jobs = [django_ojs.enqueue("a", [i], priority=p) for i, p in enumerate([0, 5, 5, -5])]
    got = claim("default", 3)
    assert [j.id for j in got] == [jobs[1].id, jobs[2].id, jobs[0].id]
    assert all(j.state == "active" and j.attempt == 1 and j.worker_id == "w" for j in got)
    assert Job.objects.get(pk=jobs[3].pk).state == "available"


@pytest.mark.django_db
def test_claim__returns_models_with_every_field_loaded():
    django_ojs.enqueue("a", ["x"], meta={"k": [1, 2]}, timeout=3)
    (job,) = claim("default", 1)
    assert job.args == ["x"] and job.meta == {"k": [1, 2]} and job.timeout_ms == 3000
    assert job.visible_until > job.started_at


@pytest.mark.django_db
def test_after_push__registers_queues_idempotently():
    driver = get_driver("default")
    with transaction.atomic():
        driver.after_push({"one", "two"}, {"one"})
        driver.after_push({"one"}, {"one"})
    assert set(Queue.objects.values_list("name", flat=True)) == {"one", "two"}


@pytest.mark.django_db
def test_try_lock__granted_when_free():
    with transaction.atomic():
        assert get_driver("default").try_lock("some-lock")


@pytest.mark.sqlite
def test_listener__sqlite_polls_and_can_be_woken():
    listener = get_driver("default").listener(["default"])
    start = time.monotonic()
    assert listener.wait(0.05) is False
    threading.Timer(0.05, listener.wake).start()
    assert listener.wait(5) is False
    assert time.monotonic() - start < 2
    listener.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_listener__postgresql_wakes_on_commit_not_on_rollback():
    listener = get_driver("default").listener(["wake-q"])
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            django_ojs.enqueue("a", queue="wake-q")
            raise RuntimeError("rollback")
        assert listener.wait(0.3) is False  # a rolled-back push never wakes anyone
        start = time.monotonic()
        django_ojs.enqueue("a", queue="wake-q")
        assert listener.wait(5) is True
        assert time.monotonic() - start < 1
        django_ojs.enqueue("a", queue="other-q")
        assert listener.wait(0.3) is False  # not one of our queues
        threading.Timer(0.05, listener.wake).start()
        assert listener.wait(5) is False
    finally:
        listener.close()
        connection.close()
