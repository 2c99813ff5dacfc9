"""OJS_READ_DATABASE: which alias each read-only page reads, and that writes never go there.

``replica`` is a second alias on the test database (``TEST["MIRROR"]``, tests/settings.py),
so both aliases hold the same rows and the test can see, per connection, which one each
page queried (``CaptureQueriesContext``). The job tables are ``ojs_job``, ``ojs_event``,
``ojs_worker`` and ``ojs_queue``: read-only pages must read them from ``replica`` only,
and pages that act (POST) from ``default`` only. Sessions, users and API keys live in
``default`` whatever the setting. A real standby serving these pages, its lag shown, is in
tests/acceptance/test_failover.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_ojs
from django_ojs import lifecycle, metrics, reaper
from django_ojs.models import Job
from tests.factories import JobFactory, WorkerFactory
from tests.integration.admin_support import ask
from tests.integration.api_support import client

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "replica"])

JOB_TABLES = re.compile(r"\bojs_(job|event|worker|queue)\b")
WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|TRUNCATE|COPY)\b", re.I)


class Captured:
    """The SQL each alias ran inside :func:`capture`."""

    def __init__(self) -> None:
        self.sql: dict[str, list[str]] = {}

    def job_tables(self, alias: str) -> list[str]:
        return [sql for sql in self.sql[alias] if JOB_TABLES.search(sql)]

    def writes(self, alias: str) -> list[str]:
        return [sql for sql in self.sql[alias] if WRITES.match(sql)]


@contextmanager
def capture() -> Iterator[Captured]:
    out = Captured()
    with (
        CaptureQueriesContext(connections["default"]) as default,
        CaptureQueriesContext(connections["replica"]) as replica,
    ):
        yield out
    out.sql = {
        "default": [q["sql"] for q in default.captured_queries],
        "replica": [q["sql"] for q in replica.captured_queries],
    }


@pytest.fixture
def replica(settings):
    settings.OJS_READ_DATABASE = "replica"


@pytest.fixture
def rows():
    """A job of each kind the pages show: active on a worker, completed, dead-lettered."""
    worker = WorkerFactory(id="w-1", queues=["default"])
    active = JobFactory(active=True, worker_id=worker.id, type="r.active")
    django_ojs.enqueue("r.waiting")
    done = django_ojs.enqueue("r.done", queue="finished")
    [claimed] = lifecycle.fetch(["finished"], worker_id="w-2", count=1)
    lifecycle.ack(claimed.id, None, worker_id="w-2")
    dead = JobFactory(discarded=True, dead_letter=True, type="r.dead")
    return {"worker": worker, "active": active, "done": done, "dead": dead}


def yes(client: Any, url: str, action: str, keys: list[Any]) -> Any:
    """The confirmation's "Yes", without following its redirect (the list shown after it
    is a GET, which reads the replica)."""
    return client.post(url, {"action": action, "post": "yes", "_selected_action": keys})


def read_from_replica_only(captured: Captured) -> None:
    assert captured.job_tables("replica"), "the page read nothing from the replica"
    assert captured.job_tables("default") == [], captured.job_tables("default")
    assert captured.writes("replica") == []


ADMIN_PAGES: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("job list", lambda r: reverse("admin:ojs_job_changelist")),
    ("job list filtered", lambda r: reverse("admin:ojs_job_changelist") + "?state__exact=active"),
    ("job list searched", lambda r: reverse("admin:ojs_job_changelist") + "?q=state:completed"),
    ("job page", lambda r: reverse("admin:ojs_job_change", args=[r["active"].pk])),
    ("worker list", lambda r: reverse("admin:ojs_worker_changelist")),
    ("worker page", lambda r: reverse("admin:ojs_worker_change", args=[r["worker"].pk])),
    ("dead letter", lambda r: reverse("admin:ojs_deadletterjob_changelist")),
    ("dashboard", lambda r: reverse("admin:ojs_dashboard_changelist")),
    ("live dashboard", lambda r: reverse("admin:ojs_dashboard_changelist") + "?live=1"),
    ("tenants", lambda r: reverse("admin:ojs_tenant_changelist")),
]


@pytest.mark.parametrize(("name", "url"), ADMIN_PAGES, ids=[n for n, _ in ADMIN_PAGES])
def test_admin_pages_read_the_replica_and_say_how_stale_it_is(
    replica, rows, admin_client, name, url
):
    with capture() as captured:
        response = admin_client.get(url(rows))
    assert response.status_code == 200
    read_from_replica_only(captured)
    html = response.content.decode()
    # On the test mirror the "replica" is the primary itself: up to date, not a replica.
    assert "Read from database &#x27;replica&#x27;, which is not a replica" in html


def test_the_job_page_shows_the_jobs_events_and_worker_from_the_replica(
    replica, rows, admin_client
):
    url = reverse("admin:ojs_job_change", args=[rows["active"].pk])
    with capture() as captured:
        html = admin_client.get(url).content.decode()
    assert "w-1" in html
    tables = " ".join(captured.job_tables("replica"))
    assert "ojs_event" in tables and "ojs_worker" in tables and "ojs_job" in tables


def test_an_admin_action_reads_and_writes_the_primary(replica, rows, admin_client):
    """The changelist's action POSTs (ask, then confirm): the rows it acts on are read
    from the primary, and the change is written there; the replica is not touched."""
    url = reverse("admin:ojs_job_changelist")
    waiting = Job.objects.get(type="r.waiting")
    with capture() as captured:
        assert ask(admin_client, url, "cancel_jobs", [waiting.pk]).status_code == 200
        assert yes(admin_client, url, "cancel_jobs", [waiting.pk]).status_code == 302
    assert Job.objects.get(pk=waiting.pk).state == "cancelled"
    assert captured.sql["replica"] == []
    assert captured.writes("default")


def test_a_worker_directive_from_its_list_goes_to_the_primary(replica, rows, admin_client):
    url = reverse("admin:ojs_worker_changelist")
    with capture() as captured:
        assert yes(admin_client, url, "quiet_workers", [rows["worker"].pk]).status_code == 302
    assert captured.sql["replica"] == []
    assert any("ojs_worker" in sql for sql in captured.writes("default"))


def test_without_the_setting_every_page_reads_the_job_database(rows, admin_client):
    for _name, url in ADMIN_PAGES:
        with capture() as captured:
            response = admin_client.get(url(rows))
        assert response.status_code == 200
        assert captured.sql["replica"] == []
        assert captured.job_tables("default")
        assert "Read from database" not in response.content.decode()


API_LISTS = [
    "/admin/jobs",
    "/admin/jobs?state=completed",
    "/admin/workers",
    "/admin/queues",
    "/admin/stats",
    "/admin/stats/history",
    "/admin/dead-letter",
    "/admin/dead-letter/stats",
    "/admin/tenants",
]


@pytest.mark.parametrize("path", API_LISTS)
def test_admin_api_lists_read_the_replica(replica, rows, path):
    api = client("admin")
    with capture() as captured:
        response = api.get(path)
    assert response.status_code == 200, response.body
    read_from_replica_only(captured)


def test_admin_api_list_shows_the_rows(replica, rows):
    body = client("admin").get("/admin/jobs?state=completed").body
    assert [item["id"] for item in body["items"]] == [str(rows["done"].id)]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/jobs/{active}"),
        ("GET", "/admin/workers/w-1"),
        ("GET", "/admin/queues/default"),
        ("POST", "/admin/jobs/{dead}/retry"),
        ("POST", "/admin/queues/default/pause"),
        ("POST", "/admin/workers/w-1/quiet"),
    ],
)
def test_admin_api_details_and_changes_read_the_primary(replica, rows, method, path):
    """One job, worker or queue is read where the next action on it is decided; changes
    read and write the primary."""
    api = client("admin")
    url = path.format(active=rows["active"].id, dead=rows["dead"].id)
    with capture() as captured:
        response = api.request(method, url, {} if method == "POST" else None)
    assert response.status_code == 200, response.body
    assert captured.sql["replica"] == []


def test_metrics_gauges_read_the_replica_and_report_its_lag(replica, rows):
    if not metrics.available():
        pytest.skip("prometheus_client is not installed")
    api = client("admin")
    with capture() as captured:
        response = api.client.generic("GET", "/ojs/metrics", headers=api.headers)
    assert response.status_code == 200
    read_from_replica_only(captured)
    assert 'ojs_read_database_lag_seconds{database="replica"} 0.0' in response.content.decode()


def test_workers_claims_and_outcomes_never_touch_the_replica(replica):
    """What decides a job's fate stays on the primary whatever OJS_READ_DATABASE says."""
    with capture() as captured:
        job = django_ojs.enqueue("r.fate", unique={"keys": ["type"]})
        [claimed] = lifecycle.fetch(["default"], worker_id="w-9", count=1)
        lifecycle.beat("w-9", active_job_ids=[claimed.id])
        lifecycle.ack(claimed.id, {"ok": True}, worker_id="w-9")
        reaper.run_once(prune=True)
    assert Job.objects.get(pk=job.id).state == "completed"
    assert captured.sql["replica"] == []


def test_replica_status_says_not_configured_without_the_setting():
    status = lifecycle.replica_status()
    assert (status.configured, status.alias, status.describe()) == (False, "default", "")


def test_check_names_a_read_alias_missing_from_databases(settings):
    settings.OJS_READ_DATABASE = "nowhere"
    ids = {message.id for message in run_checks(tags=["ojs"])}
    assert "ojs.E014" in ids


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_check_warns_when_the_read_alias_is_another_engine(settings):
    other = (
        "django.db.backends.sqlite3"
        if connections["default"].vendor == "postgresql"
        else "django.db.backends.postgresql"
    )
    settings.DATABASES = {
        **settings.DATABASES,
        "elsewhere": {**settings.DATABASES["default"], "ENGINE": other},
    }
    settings.OJS_READ_DATABASE = "elsewhere"
    messages = {message.id: message for message in run_checks(tags=["ojs"])}
    assert "ojs.W006" in messages
    assert "ojs.E014" not in messages


def test_no_check_message_for_a_mirror_alias(replica):
    ids = {message.id for message in run_checks(tags=["ojs"])}
    assert not ids & {"ojs.E014", "ojs.W006"}


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (
            lifecycle.ReplicaStatus("replica", configured=True, replica=True, lag=2.345),
            "Read from database 'replica', a replica 2.3 s behind the primary.",
        ),
        (
            lifecycle.ReplicaStatus("replica", configured=True, replica=True, lag=None),
            "Read from database 'replica', a replica: how far behind the primary it is, is "
            "not known yet.",
        ),
        (
            lifecycle.ReplicaStatus("replica", True, False, None, error="connection refused"),
            "Read from database 'replica': its replication status could not be read "
            "(connection refused).",
        ),
        (lifecycle.ReplicaStatus("default", configured=False, replica=False, lag=0.0), ""),
    ],
)
def test_what_a_page_says_about_its_replica(status, line):
    assert status.describe() == line
