"""Real ``manage.py ojs_worker`` and ``ojs_reaper`` processes on a jobs database of their own.

The processes run ``tests/acceptance/twodb_settings.py``: ``default`` and ``jobs`` are the
two test databases pytest-django made, routed by ``django_ojs.routers.OJSRouter``. On
PostgreSQL each process names its connections ``ojs-test-<pid>``, so ``pg_stat_activity``
says which database each one is on.
"""

from __future__ import annotations

import http.client
import json
import signal
import urllib.parse
from collections import Counter
from typing import Any

import pytest
from django.db import connections

import django_ojs
from django_ojs import apikeys
from django_ojs.models import CronJob, Event, Job, Workflow
from tests.acceptance.conftest import Process, wait_for
from tests.twodb.conftest import DATABASES
from tests.twodb.test_jobs_database import ojs_tables

pytestmark = [pytest.mark.django_db(databases=DATABASES, transaction=True), pytest.mark.slow]

CRON = {"twodb-tick": {"cron": "@every 1s", "type": "test.noop", "queue": "twodb-cron"}}


def request(url: str, method: str, path: str, key: str, body: Any = None) -> tuple[int, Any]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    return response.status, (json.loads(raw) if raw else None)


def connections_of(process: Process) -> list[tuple[str, str]]:
    """``(database, query)`` of each PostgreSQL connection the process holds now."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT datname, query FROM pg_stat_activity WHERE application_name = %s",
            [f"ojs-test-{process.pid}"],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def test_a_worker_drains_jobs_enqueued_over_http_and_from_python(live_server, processes):
    url = live_server.url
    _, key = apikeys.create("twodb producer", "producer")
    worker = processes.worker("--concurrency", "4", OJS_CRON=CRON)

    over_http = []
    for i in range(20):
        status, body = request(url, "POST", "/ojs/v1/jobs", key, {"type": "test.echo", "args": [i]})
        assert status == 201, body
        over_http.append(body["job"]["id"])
    from_python = [
        str(j.pk)
        for j in django_ojs.enqueue_many([{"type": "test.echo", "args": [i]} for i in range(20)])
    ]
    flow = django_ojs.chain(
        django_ojs.job("test.workflow_step", [1]), django_ojs.job("test.workflow_step", [2])
    )
    # wait() on the jobs database (LISTEN there on PostgreSQL) for a job the HTTP API made.
    assert django_ojs.wait(over_http[-1], timeout=120).result == [19]

    ids = [*over_http, *from_python]
    wait_for(
        lambda: Job.objects.filter(id__in=ids, state="completed").count() == len(ids),
        worker,
        timeout=240,
    )
    wait_for(lambda: Workflow.objects.get(pk=flow.pk).state == "completed", worker, timeout=120)
    wait_for(
        lambda: Job.objects.filter(meta__cron_name="twodb-tick").count() >= 2, worker, timeout=120
    )

    done = Counter(Event.objects.filter(type="job.completed").values_list("job_id", flat=True))
    assert {str(i) for i in done if str(i) in ids} == set(ids)
    assert all(done[j.pk] == 1 for j in Job.objects.filter(id__in=ids))
    assert {j.result[0] for j in Job.objects.filter(id__in=over_http)} == set(range(20))
    assert CronJob.objects.get(pk="twodb-tick").run_count >= 2

    if connections["jobs"].vendor == "postgresql":
        held = connections_of(worker)
        jobs_name = connections["jobs"].settings_dict["NAME"]
        # Every connection of the worker is on the jobs database, one of them LISTENing.
        assert held and {database for database, _ in held} == {jobs_name}, held
        assert any(query.startswith("LISTEN") for _, query in held), held

    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    assert ojs_tables("default") == set()
    assert {"ojs_job", "ojs_event", "ojs_worker", "ojs_cron", "ojs_workflow"} <= ojs_tables("jobs")


@pytest.mark.postgresql
def test_an_idle_worker_is_woken_by_notify_on_the_jobs_database(processes):
    # Polling every 60 s: a job done within 30 s was picked up by the notification its
    # push sent on the jobs database, received by the worker's LISTEN there.
    worker = processes.worker(OJS_WORKER_POLL_INTERVAL=60)
    wait_for(lambda: any(q.startswith("LISTEN") for _, q in connections_of(worker)), worker)
    for i in range(5):
        job = django_ojs.enqueue("test.echo", [i])
        wait_for(lambda pk=job.pk: Job.objects.get(pk=pk).state == "completed", worker, timeout=30)
    assert worker.returncode is None


def test_the_reaper_recovers_the_jobs_of_a_killed_worker(processes):
    victim = processes.worker("--concurrency", "2", "--no-reaper")
    jobs = django_ojs.enqueue_many(
        [{"type": "test.slow", "args": [{"duration_ms": 1500}]} for _ in range(4)]
    )
    wait_for(lambda: Job.objects.filter(state="active").count() == 2, victim, timeout=60)
    victim.signal(signal.SIGSTOP)
    held = set(Job.objects.filter(state="active").values_list("id", flat=True))
    victim.popen.kill()
    victim.wait(10)
    reaper = processes.reaper(OJS_WORKER_STALE_AFTER=3)
    wait_for(
        lambda: Job.objects.filter(id__in=held, state="available").count() == len(held),
        reaper,
        timeout=120,
    )
    assert Event.objects.filter(type="worker.stopped", data__reason="heartbeat_timeout").exists()
    rescuer = processes.worker("--concurrency", "2", "--no-reaper")
    wait_for(
        lambda: Job.objects.filter(state="completed").count() == len(jobs), rescuer, timeout=120
    )
    assert {j.attempt for j in Job.objects.filter(id__in=held)} == {2}
    assert ojs_tables("default") == set()
