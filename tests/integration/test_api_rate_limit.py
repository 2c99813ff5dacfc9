"""Request rate limiting of the HTTP API (rate-limiting §10.4): off by default."""

from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


def test_no_headers_and_no_limit_by_default():
    api = client("operator")
    for _ in range(5):
        response = api.get("/queues")
        assert response.status_code == 200
        assert "X-RateLimit-Limit" not in response


def test_each_caller_gets_its_own_window_with_headers_and_429(settings):
    settings.OJS_API_RATE_LIMIT = "3/min"
    first, other = client("operator"), client("operator")
    seen = [first.get("/queues") for _ in range(3)]
    assert [r["X-RateLimit-Remaining"] for r in seen] == ["2", "1", "0"]
    assert all(r["X-RateLimit-Limit"] == "3" and int(r["X-RateLimit-Reset"]) > 0 for r in seen)
    refused = first.get("/queues")
    error = assert_ojs_error(refused, 429, "rate_limited")
    assert error["retryable"] is True and int(refused["Retry-After"]) > 0
    assert other.get("/queues").status_code == 200  # another key, another window
