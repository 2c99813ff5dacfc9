"""Wire rules of the HTTP binding (HB §3-§6, §16-§19) and malformed input on every endpoint.

Every request under ``/ojs/`` gets ``OJS-Version`` and ``X-Request-Id``; every error is the
OJS envelope; nothing a client sends produces a 5xx.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import OperationalError
from django.test import RequestFactory, override_settings
from django.urls import NoReverseMatch, include, reverse, set_script_prefix
from django.urls import path as route
from rest_framework.exceptions import Throttled
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request

from django_ojs.api.exceptions import exception_handler
from django_ojs.api.views.base import _reverse
from django_ojs.api.wire import (
    JSONParser,
    OJSContentNegotiation,
    OJSJSONParser,
    _loads,
    _reject_constant,
)
from tests.factories import JobFactory
from tests.integration.api_support import OJS, OJSClient, assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


@pytest.fixture
def anonymous(db):
    return client(None)


JOB_ID = "01960000-0000-7000-8000-000000000001"
# Every endpoint with a method it serves; {id} is replaced by a real job id.
ENDPOINTS = [
    ("GET", "/ojs/manifest"),
    ("GET", "/ojs/v1/health"),
    ("POST", "/ojs/v1/jobs"),
    ("POST", "/ojs/v1/jobs/batch"),
    ("GET", "/ojs/v1/jobs/{id}"),
    ("DELETE", "/ojs/v1/jobs/{id}"),
    ("POST", "/ojs/v1/jobs/{id}/activate"),
    ("POST", "/ojs/v1/workers/fetch"),
    ("POST", "/ojs/v1/workers/ack"),
    ("POST", "/ojs/v1/workers/nack"),
    ("POST", "/ojs/v1/workers/heartbeat"),
    ("POST", "/ojs/v1/workers/progress"),
    ("PUT", "/ojs/v1/jobs/{id}/progress"),
    ("GET", "/ojs/v1/queues"),
    ("GET", "/ojs/v1/queues/default/stats"),
    ("POST", "/ojs/v1/queues/default/pause"),
    ("POST", "/ojs/v1/queues/default/resume"),
    ("GET", "/ojs/v1/dead-letter"),
    ("POST", "/ojs/v1/dead-letter/{id}/retry"),
    ("DELETE", "/ojs/v1/dead-letter/{id}"),
    ("GET", "/ojs/v1/events"),
]
POSTS = [path for method, path in ENDPOINTS if method in ("POST", "PUT")]
GETS = [path for method, path in ENDPOINTS if method == "GET"]


def test_enqueue__accepts_the_ojs_media_type_and_any_accept_header(api):
    response = api.post(
        "/jobs",
        {"type": "email.send", "args": ["a@example.com"]},
        headers={"Accept": "application/openjobspec+json"},
    )
    assert response.status_code == 201
    assert response["Content-Type"] == OJS
    assert response["OJS-Version"] == "1.0"
    assert response["X-Request-Id"].startswith("req_")


@pytest.mark.parametrize(
    "accept", ["application/xml", "text/html", "application/openjobspec+protobuf", "*/*", ""]
)
def test_responses__never_406_whatever_accept_says(api, accept):
    response = api.get("/queues", headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response["Content-Type"] == OJS


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", OJS + "; charset=UTF-8"]
)
def test_enqueue__accepts_application_json_as_an_alias(api, content_type):
    response = api.post("/jobs", {"type": "a.b", "args": []}, content_type=content_type)
    assert response.status_code == 201


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
    ],
)
def test_enqueue__other_content_types_are_400_not_415(api, content_type):
    response = api.post("/jobs", raw='{"type": "a.b", "args": []}', content_type=content_type)
    error = assert_ojs_error(response, 400, "invalid_request")
    assert "Content-Type" in error["message"]


def test_enqueue__body_without_content_type_is_400(api):
    response = api.client.generic(
        "POST",
        "/ojs/v1/jobs",
        data=b'{"type": "a.b", "args": []}',
        content_type="",
        headers=api.headers,
    )
    response.body = json.loads(response.content)
    assert_ojs_error(response, 400, "invalid_request")


@override_settings(OJS_RESPONSE_CONTENT_TYPE="application/json")
def test_response_content_type__setting_chooses_application_json(api):
    assert api.get("/queues")["Content-Type"] == "application/json"
    assert api.get("/jobs/nope")["Content-Type"] == "application/json"


def test_request_id__client_value_is_echoed_in_header_and_error(api):
    response = api.get("/jobs/" + JOB_ID, headers={"X-Request-Id": "abc-123"})
    assert response["X-Request-Id"] == "abc-123"
    assert assert_ojs_error(response, 404, "not_found")["request_id"] == "abc-123"


def test_request_id__unsafe_client_value_is_replaced(api):
    response = api.get("/queues", headers={"X-Request-Id": "x" * 500})
    assert response["X-Request-Id"].startswith("req_")


def test_request_ids__differ_between_requests(api):
    assert api.get("/queues")["X-Request-Id"] != api.get("/queues")["X-Request-Id"]


@pytest.mark.parametrize("path", ["/ojs/v1/nope", "/ojs/v2/jobs", "/ojs/", "/ojs/v1/jobs/x/y/z"])
def test_unknown_paths__404_in_the_ojs_envelope(anonymous, path):
    error = assert_ojs_error(anonymous.get(path), 404, "not_found")
    assert error["details"]["path"] == path


@pytest.mark.parametrize("path", ["/ojs/v1/jobs/", "/ojs/v1/queues/", "/ojs/manifest/"])
def test_trailing_slash__404_not_a_redirect(api, path):
    response = api.get(path)
    assert_ojs_error(response, 404, "not_found")
    assert "Location" not in response


def test_method_not_allowed__405_envelope_with_allow_header(api):
    response = api.request("PUT", "/jobs", {"type": "a.b", "args": []})
    error = assert_ojs_error(response, 405, "invalid_request")
    assert "POST" in response["Allow"]
    assert "POST" in error["details"]["allowed_methods"]


def test_options__405_and_not_advertised(api):
    response = api.request("OPTIONS", "/jobs")
    assert_ojs_error(response, 405, "invalid_request")
    assert response["Allow"] == "POST"


def test_malformed_json__400_invalid_payload(api):
    error = assert_ojs_error(api.post("/jobs", raw="{ invalid json }"), 400, "invalid_payload")
    assert error["retryable"] is False


@pytest.mark.parametrize("raw", ["[1, 2", '{"a": NaN}', '{"a": Infinity}', b"\xff\xfe{}"])
def test_invalid_json_values__400_invalid_payload(api, raw):
    assert_ojs_error(api.post("/jobs", raw=raw), 400, "invalid_payload")


def test_empty_body__400_invalid_payload(api):
    response = api.client.post("/ojs/v1/jobs", content_type=OJS, headers=api.headers)
    response.body = json.loads(response.content)
    assert_ojs_error(response, 400, "invalid_payload")


@pytest.mark.parametrize("raw", ["[]", '"text"', "42", "null", "true"])
def test_non_object_bodies__400(api, raw):
    assert_ojs_error(api.post("/jobs", raw=raw), 400, "invalid_payload")


@override_settings(OJS_MAX_REQUEST_BYTES=1024)
def test_oversize_body__413(api):
    body = {"type": "a.b", "args": ["x" * 2000]}
    error = assert_ojs_error(api.post("/jobs", body), 413, "envelope_too_large")
    assert error["details"]["limit"] == 1024


def test_oversize_body__default_limit_is_one_mebibyte(api):
    body = json.dumps({"type": "a.b", "args": ["x" * (1024 * 1024)]})
    assert_ojs_error(api.post("/jobs", raw=body), 413, "envelope_too_large")


@pytest.mark.parametrize("version", ["2.0", "0.9", "banana"])
def test_unsupported_ojs_version_header__422_unsupported(api, version):
    response = api.get("/queues", headers={"OJS-Version": version})
    error = assert_ojs_error(response, 422, "unsupported")
    assert error["details"]["supported"] == ["1.0"]


@pytest.mark.parametrize("version", ["1", "1.0", "1.0.0-rc.1"])
def test_supported_ojs_version_header__accepted(api, version):
    assert api.get("/queues", headers={"OJS-Version": version}).status_code == 200


def test_errors__carry_hint_and_docs_url(api):
    error = assert_ojs_error(api.get(f"/jobs/{JOB_ID}"), 404, "not_found")
    assert error["hint"]
    assert error["docs_url"].startswith("https://openjobspec.org/errors/")


def test_every_response__has_ojs_headers(api):
    for method, path in ENDPOINTS:
        response = api.request(method, path.replace("{id}", JOB_ID))
        assert response["OJS-Version"] == "1.0", path
        assert response["X-Request-Id"], path
        assert response["Content-Type"] == OJS, path


# --------------------------------------------------------------------- malformed input

MALFORMED_BODIES = [
    "{ invalid json }",
    "[]",
    "[{}]",
    '"x"',
    "0",
    "null",
    "{}",
    '{"type": 5, "args": {}}',
    '{"queues": "default", "count": "ten"}',
    '{"queues": [5], "count": -1, "visibility_timeout_ms": "soon"}',
    '{"queues": ["Bad Queue!"]}',
    '{"job_id": 5, "error": 7}',
    '{"job_id": ["x"], "result": {"a": 1}}',
    '{"job_id": "not-a-uuid"}',
    '{"job_id": "01960000-0000-7000-8000-000000000001", "error": {"message": 5}}',
    '{"job_id": "01960000-0000-7000-8000-000000000001", "requeue": "yes"}',
    '{"worker_id": "", "active_jobs": {"a": 1}}',
    '{"worker_id": "w", "active_jobs": 3, "active_job_ids": [1, 2]}',
    '{"worker_id": "w", "state": "sleeping", "pid": -4}',
    '{"jobs": [{"type": "a.b", "args": []}, {"args": []}]}',
    '{"jobs": "all"}',
    '{"override": {"queue": "Nope!"}}',
    '{"override": 3}',
    '{"type": "a.b", "args": [], "options": {"retry": {"max_attempts": -1}}}',
    '{"type": "a.b", "args": [], "options": {"delay_until": "tomorrow", "priority": 1e9}}',
    '{"type": "a.b", "args": [], "options": {"timeout_ms": -5, "tags": "x"}}',
    '{"type": "a.b", "args": [], "id": "00000000-0000-4000-8000-000000000000"}',
    '{"type": "' + "a" * 300 + '", "args": []}',
    '{"deeply": ' + "[" * 50 + "]" * 50 + "}",
]


@pytest.mark.parametrize("raw", MALFORMED_BODIES)
@pytest.mark.parametrize("path", POSTS)
def test_malformed_bodies_on_every_post__never_5xx(api, path, raw):
    job = JobFactory(discarded=True)
    method = next(m for m, p in ENDPOINTS if p == path)
    response = api.request(method, path.replace("{id}", str(job.id)), raw=raw)
    assert response.status_code < 500, (path, raw, response.body)
    if response.status_code >= 400:
        assert_ojs_error(response, response.status_code)


@pytest.mark.parametrize(
    "job_id", ["not-a-uuid", "0", "%00", "01960000-0000-7000-8000-00000000000Z", "a" * 300]
)
@pytest.mark.parametrize("path", [p for _, p in ENDPOINTS if "{id}" in p])
def test_malformed_ids_on_every_job_endpoint__404(api, path, job_id):
    method = next(m for m, p in ENDPOINTS if p == path)
    body = {"progress": 0.5} if path.endswith("/progress") else None  # needs a body
    response = api.request(method, path.replace("{id}", job_id), body)
    assert_ojs_error(response, 404, "not_found")


@pytest.mark.parametrize(
    "query",
    [
        "limit=abc",
        "limit=0",
        "limit=-3",
        "offset=-1",
        "offset=x",
        "cursor=not-base64!!",
        "cursor=e30",  # {} is fine
        "cursor=WzFd",  # [1]
        "cursor=eyJvIjogLTF9",  # {"o": -1}
        "since=yesterday",
        "after=nope",
        "after=01960000-0000-7000-8000-000000000001",
        "queue=Bad!",
        "types=,,,",
        "job_id=zzz",
    ],
)
@pytest.mark.parametrize("path", GETS)
def test_malformed_query_parameters_on_every_get__never_5xx(api, path, query):
    response = api.get(path.replace("{id}", JOB_ID) + "?" + query)
    assert response.status_code < 500, (path, query, response.body)
    if response.status_code >= 400:
        assert_ojs_error(response, response.status_code)


@pytest.mark.parametrize("name", ["Bad!", "-lead", "a" * 200, "UPPER"])
@pytest.mark.parametrize("action", ["stats", "pause", "resume"])
def test_malformed_queue_names__4xx(api, name, action):
    method = "GET" if action == "stats" else "POST"
    response = api.request(method, f"/queues/{name}/{action}")
    assert 400 <= response.status_code < 500
    assert_ojs_error(response, response.status_code)


def test_bodies_on_get_and_delete__are_ignored(api):
    job = api.enqueue()
    response = api.request("DELETE", f"/jobs/{job['id']}", {"anything": True})
    assert response.status_code == 200
    assert api.request("GET", "/queues", {"x": 1}).status_code == 200


def test_client_supplied_anonymous_requests_to_unknown_paths_still_get_headers():
    response = OJSClient().get("/ojs/v1/does-not-exist")
    assert response["OJS-Version"] == "1.0"


@pytest.mark.parametrize(
    ("exc", "status"), [(RuntimeError("bug"), 500), (OperationalError("db down"), 503)]
)
def test_unexpected_errors__become_a_retryable_backend_error_envelope(exc, status, caplog):
    response = exception_handler(exc, {"request": None, "view": None})
    error = response.data["error"]
    assert response.status_code == status
    assert (error["code"], error["retryable"]) == ("backend_error", True)
    assert "bug" not in error["message"] and "db down" not in error["message"]
    assert "OJS API request" in caplog.text  # logged with the traceback


@pytest.mark.parametrize(("wait", "retry_after"), [(2.4, "3"), (None, None)])
def test_throttled__is_a_retryable_429_with_retry_after_when_known(wait, retry_after):
    response = exception_handler(Throttled(wait=wait), {"request": None, "view": None})
    error = response.data["error"]
    assert response.status_code == 429
    assert (error["code"], error["retryable"]) == ("rate_limited", True)
    assert response.headers.get("Retry-After") == retry_after


# ------------------------------------------------------- shortcuts that must equal DRF/Django

# The API mounted elsewhere, for the Location templates (override_settings(ROOT_URLCONF)).
urlpatterns = [route("elsewhere/api/", include("django_ojs.urls"))]


@pytest.mark.parametrize(
    "args",
    [
        (),
        (JOB_ID,),
        ("nightly-report_v2.x~1",),
        ("with space",),
        ("ünïcode",),
        ("per%cent",),
        ("a/b",),
        ("a", "b"),
        (12,),
    ],
)
def test_location_templates__equal_reverse(args):
    for name in ("ojs:cron-detail", "ojs:health", "ojs:job-detail"):
        for prefix in ("/", "/mounted/"):
            for urlconf in (None, __name__):
                with override_settings(**({"ROOT_URLCONF": urlconf} if urlconf else {})):
                    set_script_prefix(prefix)
                    try:
                        try:
                            expected = reverse(name, args=args)
                        except NoReverseMatch:
                            with pytest.raises(NoReverseMatch):
                                _reverse(name, args)
                            continue
                        assert _reverse(name, args) == expected  # computed
                        assert _reverse(name, args) == expected  # remembered
                    finally:
                        set_script_prefix("/")


def test_location__follows_the_mount_point(api):
    body = {"type": "a.b", "args": []}
    with override_settings(ROOT_URLCONF=__name__):
        response = api.client.post(
            "/elsewhere/api/v1/jobs", json.dumps(body), content_type=OJS, headers=api.headers
        )
    assert response.status_code == 201
    job_id = json.loads(response.content)["job"]["id"]
    assert response["Location"] == f"/elsewhere/api/v1/jobs/{job_id}"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        OJS,
        " Application/JSON ",
        "APPLICATION/OPENJOBSPEC+JSON",
        "application/json; charset=utf-8",
        "application/json;charset=latin-1",
        "application/*",
        "*/*",
        "application/json/x",
        "application",
        "text/plain",
        "",
        "application/json" + " " * 300,
    ],
)
def test_parser_selection__equals_drf(content_type):
    request = Request(RequestFactory().post("/ojs/v1/jobs", data=b"{}", content_type=content_type))
    parsers = [OJSJSONParser(), JSONParser()]
    expected = DefaultContentNegotiation().select_parser(request, parsers)
    assert OJSContentNegotiation().select_parser(request, parsers) is expected


@pytest.mark.parametrize("raw", ['\ufeff{"type": "a.b", "args": []}', "[[1]]", "{} x", ""])
def test_json_decoding__equals_json_loads(raw):
    try:
        expected: Any = json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            _loads(raw)
    else:
        assert _loads(raw) == expected
