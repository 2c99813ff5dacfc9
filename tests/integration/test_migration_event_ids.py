"""Migration 0018: event ids lose their unique index, and get it back going backwards,
on the plain table and (PostgreSQL) on the time-partitioned layout."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from django_ojs import lifecycle

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("ojs", "0017_ids_on_the_clock")]
AFTER = [("ojs", "0018_event_ids_without_unique_index")]


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def unique_on_id() -> list[list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "ojs_event")
    return [c["columns"] for c in constraints.values() if c["unique"] and "id" in c["columns"]]


@pytest.mark.parametrize(
    "layout", ["plain", pytest.param("partitioned", marks=pytest.mark.postgresql)]
)
def test_event_ids_lose_their_unique_index_and_get_it_back(layout):
    try:
        migrate(BEFORE)
        if layout == "partitioned":
            lifecycle.partition_tables(["events"], interval="day", premake=1)
        expected = [["id", "time"]] if layout == "partitioned" else [["id"]]
        assert unique_on_id() == expected
        migrate(AFTER)
        assert unique_on_id() == []
        migrate(BEFORE)
        assert unique_on_id() == expected
    finally:
        if layout == "partitioned":
            lifecycle.unpartition_tables(["events"])
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes("ojs"))
