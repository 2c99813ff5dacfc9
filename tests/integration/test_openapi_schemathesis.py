"""Schemathesis: every operation of the OJS OpenAPI schema that django-ojs serves, no 5xx.

``tests/openapi.yaml`` is the upstream OJS schema (``spec/openapi.yaml`` of the Open Job
Spec, copied unchanged; django-ojs does not serve a schema of its own). Schemathesis
generates requests from it, valid and invalid, and sends them to the Django WSGI app with
an admin key; the only check is ``not_a_server_error``. Every operation django-ojs serves
is in: the core binding, cron, workflows and the admin API. What it does not serve (the
debug endpoints, per-job and per-queue event streams, the WebSocket) is left out: 404s.
``tests/openapi-extensions.yaml`` describes, the same way, what django-ojs serves beyond
that schema: the bulk-operations extension, maintenance mode, worker pools, the admin
API's tenants and a queue's details (queue config §9.3).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.integration.api_support import key

pytestmark = pytest.mark.django_db

SCHEMA = Path(__file__).resolve().parents[1] / "openapi.yaml"
SERVED = (
    r"^/ojs/(manifest|v1/(health|jobs|jobs/batch|jobs/\{id\}|workers/(fetch|ack|nack|heartbeat)"
    r"|queues|queues/\{name\}/(stats|pause|resume)|dead-letter|dead-letter/\{id\}(/retry)?"
    r"|dead-letter/retry|cron|cron/\{name\}|workflows|workflows/\{id\}|admin/.+))$"
)
#: The schema's paths django-ojs does not serve (each a 404), named so that a new path in
#: the schema is a decision, not an accident.
NOT_SERVED = {
    "/ojs/v1/jobs/{id}/events",
    "/ojs/v1/queues/{name}/events",
    "/ojs/v1/ws",
    "/ojs/v1/debug/status",
    "/ojs/v1/debug/jobs/{id}/traces",
    "/ojs/v1/debug/jobs/{id}/traces/{attempt}",
    "/ojs/v1/debug/failures",
}

schema = schemathesis.openapi.from_path(SCHEMA).include(path_regex=SERVED)
extensions = schemathesis.openapi.from_path(SCHEMA.with_name("openapi-extensions.yaml"))


@pytest.fixture
def app() -> Iterator[WSGIHandler]:
    # As Django's test client does: a request must not close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {key('admin')}"}


def test_the_schema_covers_the_served_operations():
    everything = schemathesis.openapi.from_path(SCHEMA)
    paths = {op.ok().path for op in everything.get_all_operations()}
    served = {op.ok().path for op in schema.get_all_operations()}
    assert paths - served == NOT_SERVED
    assert {"/ojs/v1/cron", "/ojs/v1/workflows", "/ojs/v1/admin/jobs"} <= served


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_operation_answers_5xx(case: Any, app: WSGIHandler, auth: dict[str, str]):
    case.call_and_validate(
        base_url="http://testserver", app=app, headers=auth, checks=[not_a_server_error]
    )


def test_the_extensions_schema_covers_bulk_maintenance_pools_tenants_and_queues():
    assert len(list(extensions.get_all_operations())) == 23


@extensions.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_extension_operation_answers_5xx(case: Any, app: WSGIHandler, auth: dict[str, str]):
    case.call_and_validate(
        base_url="http://testserver", app=app, headers=auth, checks=[not_a_server_error]
    )
