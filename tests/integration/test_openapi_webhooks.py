"""Schemathesis over the webhook endpoints: no 5xx, whatever is sent.

``tests/openapi.yaml`` is the upstream OJS schema copied unchanged and has no webhook
paths, so ``tests/openapi_webhooks.yaml`` describes them (request shapes only). Requests
valid and invalid go to the Django WSGI app with an admin key; a subscription that exists
is made first so that some generated ids and bodies reach it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.factories import WebhookSubscriptionFactory
from tests.integration.test_openapi_schemathesis import app, auth

__all__ = ["app", "auth"]

pytestmark = pytest.mark.django_db

SCHEMA = Path(__file__).resolve().parents[1] / "openapi_webhooks.yaml"
schema = schemathesis.openapi.from_path(SCHEMA)


@pytest.fixture(autouse=True)
def subscription(settings: Any) -> None:
    WebhookSubscriptionFactory()


def test_the_schema_covers_every_webhook_operation():
    assert len(list(schema.get_all_operations())) == 11


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_webhook_operation_answers_5xx(case: Any, app: WSGIHandler, auth: dict[str, str]):
    case.call_and_validate(
        base_url="http://testserver", app=app, headers=auth, checks=[not_a_server_error]
    )
