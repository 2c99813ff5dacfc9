"""Migration 0004: existing producer keys become operator keys (the same abilities)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("ojs", "0003_admin_proxies")]
AFTER = [("ojs", "0004_apikey_operator_scope_queues")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_producer_keys_become_operators_and_back():
    apps = migrate(BEFORE)
    ApiKey = apps.get_model("ojs", "ApiKey")
    for scope in ("producer", "worker", "admin"):
        ApiKey.objects.create(name=scope, prefix=f"{scope:0<12}", hashed_secret="x", scope=scope)
    try:
        apps = migrate(AFTER)
        ApiKey = apps.get_model("ojs", "ApiKey")
        scopes = dict(ApiKey.objects.values_list("name", "scope"))
        assert scopes == {"producer": "operator", "worker": "worker", "admin": "admin"}
        assert all(q == [] for q in ApiKey.objects.values_list("queues", flat=True))

        apps = migrate(BEFORE)
        ApiKey = apps.get_model("ojs", "ApiKey")
        assert dict(ApiKey.objects.values_list("name", "scope"))["producer"] == "producer"
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes("ojs"))
