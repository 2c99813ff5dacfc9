"""LISTEN through its own alias (``OJS_LISTEN_DATABASE``), and polling when it looks pooled.

A real PgBouncer in transaction mode is in ``tests/acceptance/test_pgbouncer.py``; here the
aliases are copies of the test database's, some with the settings of a pooled one.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.core import checks
from django.db import connection, connections
from django.test import override_settings

import django_ojs
from django_ojs import lifecycle
from django_ojs.drivers import get_driver
from django_ojs.drivers.postgresql.listener import listen_alias, pooled_signs


def test_pooled_signs():
    assert pooled_signs({"PORT": "5432", "OPTIONS": {}}) == []
    assert pooled_signs({"PORT": 6432}) == ["PORT is 6432"]
    assert pooled_signs({"PORT": "6432"}) == ["PORT is 6432"]
    assert pooled_signs({"OPTIONS": {"prepare_threshold": None}}) == [
        "OPTIONS['prepare_threshold'] is None"
    ]
    assert pooled_signs({"OPTIONS": {"prepare_threshold": 5}}) == []
    assert pooled_signs({"DISABLE_SERVER_SIDE_CURSORS": True, "PORT": "x"}) == [
        "DISABLE_SERVER_SIDE_CURSORS is True"
    ]


@pytest.fixture
def alias():
    """Add an alias to the test database (a copy of ``default``'s settings, changed)."""
    added: list[str] = []

    def add(name: str, **changes) -> str:
        connections.settings[name] = {**connections["default"].settings_dict, **changes}
        added.append(name)
        return name

    yield add
    for name in added:
        connections[name].close()
        del connections[name]
        del connections.settings[name]


def test_listen_alias_applies_to_the_job_database_only():
    assert listen_alias("default") == "default"
    with override_settings(OJS_LISTEN_DATABASE="direct"):
        assert listen_alias("default") == "direct"
        assert listen_alias("other") == "other"


@pytest.mark.django_db
def test_check__listen_database_must_exist():
    with override_settings(OJS_LISTEN_DATABASE="nowhere"):
        found = [m.id for m in checks.run_checks(tags=["ojs"])]
    assert "ojs.E013" in found


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_listener__uses_the_listen_alias_and_wakes(alias):
    direct = alias("direct")
    with override_settings(OJS_LISTEN_DATABASE=direct):
        listener = get_driver("default").listener(["wake-q"])
        try:
            assert (listener.alias, listener.polling) == ("direct", False)
            django_ojs.enqueue("a", queue="wake-q")
            assert listener.wait(5) is True
            assert not [m for m in checks.run_checks(tags=["ojs"]) if m.id == "ojs.W005"]
        finally:
            listener.close()
            connection.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_listener__polls_with_one_warning_when_the_alias_looks_pooled(alias, caplog):
    pooled = alias("pooled", DISABLE_SERVER_SIDE_CURSORS=True)
    with override_settings(OJS_LISTEN_DATABASE=pooled), caplog.at_level(logging.WARNING):
        listener = get_driver("default").listener(["wake-q"])
        try:
            assert listener.polling is True
            warnings = [r.getMessage() for r in caplog.records if "LISTEN" in r.getMessage()]
            assert len(warnings) == 1
            assert "'pooled'" in warnings[0] and "polling" in warnings[0]
            django_ojs.enqueue("a", queue="wake-q")
            start = time.monotonic()
            assert listener.wait(0.2) is False  # no notification: the poll interval passes
            threading.Timer(0.05, listener.wake).start()
            assert listener.wait(30) is False
            assert time.monotonic() - start < 20
            found = [m for m in checks.run_checks(tags=["ojs"]) if m.id == "ojs.W005"]
            assert len(found) == 1 and "'pooled'" in found[0].msg
        finally:
            listener.close()
            connection.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_wait_finished__listens_on_the_listen_alias(alias):
    direct = alias("direct")
    job = django_ojs.enqueue("a")
    (claimed,) = lifecycle.fetch(["default"], worker_id="w1")
    threading.Timer(
        0.2, lambda: (lifecycle.ack(claimed.id, worker_id="w1"), connections.close_all())
    ).start()
    with override_settings(OJS_LISTEN_DATABASE=direct):
        assert get_driver("default").wait_finished(job.id, 30) == "completed"
    connection.close()
