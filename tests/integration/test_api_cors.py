"""The OJS HTTP API called from another origin: django-cors-headers with API keys.

The settings are ``tests/cors_settings.py``'s, the ones the how-to "Use the official admin
UI" shows; OJS HTTP binding §20 says what a preflight's answer holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.test import Client, override_settings

from django_ojs import apikeys
from django_ojs.models import Queue
from tests import cors_settings, settings

pytestmark = pytest.mark.django_db

ALLOWED = "https://ops.example.com"
OTHER = "https://evil.example.net"
#: What cors_settings adds to (or changes in) the test settings.
CORS = {
    name: getattr(cors_settings, name)
    for name in dir(cors_settings)
    if name.isupper() and getattr(cors_settings, name) != getattr(settings, name, None)
}


@pytest.fixture(autouse=True)
def _cors() -> Iterator[None]:
    assert {"INSTALLED_APPS", "MIDDLEWARE", "CORS_ALLOWED_ORIGINS"} <= set(CORS)
    with override_settings(**CORS):
        yield


@pytest.fixture
def key() -> str:
    return apikeys.create("ops-dashboard", "admin")[1]


def preflight(path: str, origin: str, method: str = "GET") -> object:
    return Client().options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type, ojs-version",
        },
    )


@pytest.mark.parametrize(
    ("path", "method"),
    [
        ("/ojs/v1/admin/queues", "GET"),
        ("/ojs/v1/admin/queues/email/pause", "POST"),
        ("/ojs/v1/admin/dead-letter/abc", "DELETE"),
        ("/ojs/manifest", "GET"),
    ],
)
def test_preflight_from_an_allowed_origin__is_answered_before_the_view(path, method):
    response = preflight(path, ALLOWED, method)
    # The OJS views answer OPTIONS with 405; the middleware answers first.
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == ALLOWED
    allowed_headers = {h.strip() for h in response["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "ojs-version", "x-request-id"} <= allowed_headers
    assert method in response["Access-Control-Allow-Methods"].split(", ")
    assert response["Access-Control-Max-Age"] == "86400"
    assert "Access-Control-Allow-Credentials" not in response  # keys, not the session


def test_the_real_request_with_a_bearer_key__works_and_exposes_the_ojs_headers(key):
    client = Client()
    headers = {"Origin": ALLOWED, "Authorization": f"Bearer {key}"}
    response = client.get("/ojs/v1/admin/queues", headers=headers)
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == ALLOWED
    exposed = {h.strip() for h in response["Access-Control-Expose-Headers"].split(",")}
    assert {"X-Request-Id", "OJS-Version", "Retry-After"} <= exposed
    # A write: a key needs no CSRF token (no cookie is involved).
    Queue.objects.create(name="email")
    response = Client(enforce_csrf_checks=True).post(
        "/ojs/v1/admin/queues/email/pause", content_type="application/json", headers=headers
    )
    assert response.status_code == 200, response.content
    assert response["Access-Control-Allow-Origin"] == ALLOWED
    assert Queue.objects.get(name="email").paused


def test_errors__carry_the_cors_headers_too():
    """A 401 the page can read (and show), not an opaque network error."""
    response = Client().get("/ojs/v1/admin/queues", headers={"Origin": ALLOWED})
    assert response.status_code == 401
    assert json.loads(response.content)["error"]["code"] == "unauthenticated"
    assert response["Access-Control-Allow-Origin"] == ALLOWED


def test_a_disallowed_origin__gets_no_allow_header(key):
    response = preflight("/ojs/v1/admin/queues", OTHER)
    assert "Access-Control-Allow-Origin" not in response
    real = Client().get(
        "/ojs/v1/admin/queues", headers={"Origin": OTHER, "Authorization": f"Bearer {key}"}
    )
    # The server answers (CORS is the browser's rule), but no browser lets the page read it.
    assert "Access-Control-Allow-Origin" not in real


def test_paths_outside_the_ojs_api__are_not_opened():
    response = preflight("/ojs/admin/", ALLOWED)
    assert "Access-Control-Allow-Origin" not in response
    response = preflight("/admin/", ALLOWED)
    assert "Access-Control-Allow-Origin" not in response


def test_options_without_a_preflight__is_still_the_apis_405(key):
    response = Client().options(
        "/ojs/v1/admin/queues", headers={"Origin": ALLOWED, "Authorization": f"Bearer {key}"}
    )
    assert response.status_code == 405
