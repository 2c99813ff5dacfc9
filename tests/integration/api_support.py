"""Helpers for the HTTP API tests: authenticated clients and OJS request/response checks.

Test modules define their fixtures from :func:`client` (``client("worker")``...).
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework.test import APIClient

from django_ojs import apikeys

OJS = "application/openjobspec+json"
BASE = "/ojs/v1"


class OJSClient:
    """An ``APIClient`` that speaks OJS JSON and carries a bearer key (or none)."""

    def __init__(self, key: str | None = None, **client_kwargs: Any):
        self.client = APIClient(**client_kwargs)
        self.headers: dict[str, str] = {}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | str | None = None,
        content_type: str = OJS,
        headers: dict[str, str] | None = None,
    ) -> Any:
        url = path if path.startswith("/ojs") else f"{BASE}{path}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        response = self.client.generic(
            method,
            url,
            data=data if data is not None else "",
            content_type=content_type if data is not None else None,
            headers={**self.headers, **(headers or {})},
        )
        if response.streaming:  # server-sent events: the test reads streaming_content
            response.body = None
        else:
            response.body = json.loads(response.content) if response.content else None
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def enqueue(self, type: str = "test.echo", args: Any = None, **options: Any) -> dict:
        body: dict[str, Any] = {"type": type, "args": args if args is not None else []}
        if options:
            body["options"] = options
        response = self.post("/jobs", body)
        assert response.status_code == 201, response.body
        return response.body["job"]

    def fetch(self, queue: str = "default", **extra: Any) -> list[dict]:
        response = self.post("/workers/fetch", {"queues": [queue], **extra})
        assert response.status_code == 200, response.body
        return response.body["jobs"]


def key(scope: str) -> str:
    """A new API key of ``scope`` (the full ``ojs_…`` string)."""
    return apikeys.create(f"test-{scope}", scope)[1]


def client(scope: str | None = "admin", **client_kwargs: Any) -> OJSClient:
    """A client with a new key of ``scope`` (``admin`` may call everything), or none."""
    return OJSClient(key(scope) if scope else None, **client_kwargs)


def assert_ojs_error(response: Any, status: int, code: str | None = None) -> dict:
    """The response is an OJS error envelope (HB §16.1) with the OJS headers."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == OJS
    assert response["OJS-Version"] == "1.0"
    assert response["X-Request-Id"]
    error = response.body["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["retryable"], bool)
    assert isinstance(error["details"], dict)
    assert error["request_id"] == response["X-Request-Id"]
    if code is not None:
        assert error["code"] == code, error
    return error
