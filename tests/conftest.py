"""Shared fixtures: vendor markers, database helpers and a polling wait helper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection

#: Tests of the jobs in a database of their own: collected only with those settings.
TWODB = Path(__file__).with_name("twodb")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``tests/twodb/`` needs ``tests.twodb_settings`` (``make test`` runs it that way); with
    any other settings it is not collected."""
    if collection_path == TWODB:
        return getattr(settings, "OJS_DATABASE", DEFAULT_DB_ALIAS) == DEFAULT_DB_ALIAS
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vendor = connection.vendor
    for item in items:
        for marker, needed in (("postgresql", "postgresql"), ("sqlite", "sqlite")):
            if item.get_closest_marker(marker) and vendor != needed:
                item.add_marker(pytest.mark.skip(reason=f"needs {needed}; this run uses {vendor}"))


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass."""

    def wait(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s")
            time.sleep(interval)

    return wait


@pytest.fixture(autouse=True)
def _forget_worker_touches() -> None:
    """Each test starts with no worker recorded by an earlier one's fetches (their rows
    were rolled back or truncated with that test's database)."""
    from django_ojs.lifecycle import claim, workers

    claim._touched.clear()
    workers._stopping.clear()


@pytest.fixture(autouse=True)
def _forget_webhook_state() -> None:
    """Each test starts without this process's cached "any subscription?" answer and seen
    event gaps (the rows they were about went with an earlier test's database)."""
    from django_ojs.lifecycle import webhooks

    webhooks.forget()
    webhooks._gaps.clear()


@pytest.fixture(autouse=True)
def _forget_maintenance() -> None:
    """Each test starts with no maintenance switch (and no tenants' limits) cached from an
    earlier one (whose rows were rolled back or truncated with that test's database)."""
    from django_ojs import lifecycle
    from django_ojs.lifecycle import isolation

    lifecycle.forget_maintenance()
    lifecycle.forget_tenant_limits()
    # Nor the isolated pools' queues (fair scheduling §6.3) an earlier test's pools had.
    isolation.forget()


@pytest.fixture(autouse=True, scope="session")
def _cheap_api_key_hashes() -> Iterator[None]:
    """API keys created by the tests are hashed with scrypt at N=2**4 instead of 2**14.

    Keys are still scrypt hashes, checked by the same code (a hash carries its own cost,
    so processes the tests start verify them alike); only the work factor is lower. At
    the production cost each key costs 35 ms of CPU to create and 35 ms at its first
    request: about a sixth of the suite's time, as a slow password hasher would (see
    PASSWORD_HASHERS in tests/settings.py)."""
    from django_ojs import apikeys

    production = apikeys.SCRYPT_N
    apikeys.SCRYPT_N = 2**4
    yield
    apikeys.SCRYPT_N = production
