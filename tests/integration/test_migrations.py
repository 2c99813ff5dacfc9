"""django-ojs's migrations: one initial migration (and a PostgreSQL-only one, then the
queues' own retention), forwards and backwards, on SQLite, PostgreSQL and PostgreSQL's partitioned layout.

Each test takes the app back to zero (no table left) and forwards again, then uses the
job store; whatever happens, it leaves the schema migrated for the next test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

MIGRATIONS = [
    "0001_initial",
    "0002_postgresql",
    "0003_worker_pools",
    "0004_tenants",
    "0005_tenant_limits_and_pools",
]


def migrate(target: list[tuple[str, str | None]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes("ojs")


def ojs_tables() -> set[str]:
    return {t for t in connection.introspection.table_names() if t.startswith("ojs_")}


@pytest.fixture
def back_to_latest() -> Iterator[None]:
    try:
        yield
    finally:
        migrate(latest())


def test_the_app_has_one_initial_migration_and_the_postgresql_one():
    graph = MigrationExecutor(connection).loader.graph
    assert sorted(name for app, name in graph.nodes if app == "ojs") == MIGRATIONS
    assert latest() == [("ojs", "0005_tenant_limits_and_pools")]


def round_trip() -> None:
    migrate([("ojs", None)])
    assert ojs_tables() == set()
    migrate(latest())
    assert {"ojs_job", "ojs_event", "ojs_worker", "ojs_queue", "ojs_apikey"} <= ojs_tables()
    job = django_ojs.enqueue("test.echo", ["after the round trip"])
    claimed = lifecycle.fetch(["default"], 1, worker_id="w-migrations")
    assert [j.id for j in claimed] == [job.id]
    lifecycle.ack(job.id, {"ok": True}, worker_id="w-migrations")
    assert Job.objects.get(pk=job.id).state == "completed"


def test_backwards_to_zero_and_forwards_again(back_to_latest):
    django_ojs.enqueue("test.echo", ["before"])
    round_trip()


def postgresql_extras() -> tuple[bool, set[str]]:
    """Whether the wake-up trigger exists, and the job columns without statistics."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname = 'ojs_job_finished'")
        trigger = cursor.fetchone()[0] == 1
        cursor.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'ojs_job'::regclass "
            "AND attnum > 0 AND attstattarget = 0 AND NOT attisdropped"
        )
        return trigger, {row[0] for row in cursor.fetchall()}


@pytest.mark.postgresql
def test_the_postgresql_migration_comes_and_goes(back_to_latest):
    trigger, quiet = postgresql_extras()
    assert trigger and {"args", "meta", "result"} <= quiet
    migrate([("ojs", "0001_initial")])
    assert postgresql_extras() == (False, set())
    migrate([("ojs", "0002_postgresql")])
    assert postgresql_extras() == (trigger, quiet)
    migrate(latest())
    assert postgresql_extras() == (trigger, quiet)


@pytest.mark.postgresql
def test_backwards_and_forwards_from_the_partitioned_layout(back_to_latest):
    django_ojs.enqueue("test.echo", ["partitioned"])
    lifecycle.partition_tables(["jobs", "events"], interval="day", premake=1)
    assert lifecycle.partition_layout("jobs") is not None
    round_trip()
    assert lifecycle.partition_layout("jobs") is None  # plain tables again
