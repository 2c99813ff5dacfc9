"""Every bad input is a 4xx and stores nothing (issue 9, part 3).

Each case used to reach the database and come back as a retryable 503/500
``backend_error`` (or a raw 500 for batches): NUL characters and lone surrogates,
numbers too large for their columns, timestamps past year 9999, JSON nested hundreds of
levels deep. Now ``django_ojs.validation`` refuses them first, with a message naming the
field, over HTTP and through the Python API alike, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import DataError
from django.test import override_settings

import django_ojs
from django_ojs import envelope, lifecycle, validation
from django_ojs.api.exceptions import exception_handler
from django_ojs.exceptions import ValidationError
from django_ojs.models import Job, Worker
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

NUL = "\u0000"
SURROGATE = "\ud800"
DEEP = 500  # nesting that used to exhaust the stack somewhere between parser and database


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def job(**fields: Any) -> dict[str, Any]:
    return {"type": "test.bad", "args": [], **fields}


# (body sent to POST /jobs, field named in the error); the same body in a batch of two.
PUSH_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "NUL in args": (job(args=[f"a{NUL}b"]), "args[0]"),
    "surrogate in args": (job(args=[{"k": SURROGATE}]), "args[0].k"),
    "NUL in an args key": (job(args=[{f"k{NUL}": 1}]), "args[0]"),
    "NUL in meta": (job(meta={"trace": NUL}), "meta.trace"),
    "surrogate in a meta key": (job(meta={SURROGATE: 1}), "meta"),
    "NUL in tags": (job(tags=[f"x{NUL}"]), "tags"),
    "NUL in schema": (job(schema=f"urn:{NUL}"), "schema"),
    "NUL in an unknown attribute": (job(x_custom=NUL), "x_custom"),
    "surrogate in options.metadata": (job(options={"metadata": {"m": SURROGATE}}), "meta.m"),
    "NUL in retry.non_retryable_errors": (
        job(retry={"non_retryable_errors": [NUL]}),
        "retry.non_retryable_errors",
    ),
    "retry.max_attempts 10^12": (job(retry={"max_attempts": 10**12}), "retry.max_attempts"),
    "retry.initial_interval_ms 10^30": (
        job(retry={"initial_interval_ms": 10**30}),
        "retry.initial_interval_ms",
    ),
    "retry.max_interval 400-digit years": (
        job(retry={"max_interval": "P" + "9" * 400 + "Y"}),
        "retry.max_interval",
    ),
    "timeout 1e300": (job(timeout=1e300), "timeout"),
    "timeout_ms 10^30": (job(timeout_ms=10**30), "timeout_ms"),
    "visibility_timeout_ms 10^30": (job(visibility_timeout_ms=10**30), "visibility_timeout_ms"),
    "enqueue_ttl in ISO 10^8 years": (job(enqueue_ttl="P99999999Y"), "enqueue_ttl"),
    "scheduled_at +P99999999Y": (job(scheduled_at="+P99999999Y"), "scheduled_at"),
    "scheduled_at past year 9999 in UTC": (
        job(scheduled_at="9999-12-31T23:00:00-05:00"),
        "scheduled_at",
    ),
    "expires_at before year 1 in UTC": (job(expires_at="0001-01-01T00:00:00+01:00"), "expires_at"),
    "args nested 500 deep": (job(args=nested(DEEP)), ""),
    "meta nested 65 deep": (job(meta={"a": nested(64)}), "meta"),
    "long schema": (job(schema="urn:" + "x" * 600), "schema"),
}


def _count() -> int:
    return Job.objects.count()


@pytest.mark.parametrize(("body", "field"), PUSH_CASES.values(), ids=PUSH_CASES.keys())
def test_push_refuses_unstorable_input_over_http(body: dict[str, Any], field: str):
    api = client("producer")
    api.enqueue("test.seed")
    before = _count()

    error = assert_ojs_error(api.post("/jobs", body), 400 if "retry" not in body else 422)
    batch = api.post("/jobs/batch", {"jobs": [job(), body]})  # 2+ jobs used to be a raw 500
    batch_error = assert_ojs_error(batch, error and batch.status_code)

    assert batch.status_code in (400, 422)
    assert error["retryable"] is False and batch_error["retryable"] is False
    if field:
        assert error["details"]["field"] == field
        assert batch_error["details"]["index"] == 1
    assert _count() == before


def _python_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in body.items() if k not in ("type", "args", "options", "x_custom")}
    if "options" in body:
        kwargs["meta"] = body["options"]["metadata"]
    if "x_custom" in body:
        kwargs["extra"] = {"x_custom": body["x_custom"]}
    for name in ("timeout_ms", "visibility_timeout_ms"):
        if name in kwargs:
            kwargs[name.removesuffix("_ms")] = kwargs.pop(name) / 1000
    return kwargs


@pytest.mark.parametrize(("body", "field"), PUSH_CASES.values(), ids=PUSH_CASES.keys())
def test_enqueue_refuses_the_same_input(body: dict[str, Any], field: str):
    kwargs = _python_kwargs(body)
    before = _count()
    with pytest.raises(ValidationError) as single:
        django_ojs.enqueue(body["type"], body["args"], **kwargs)
    with pytest.raises(ValidationError) as batch:
        lifecycle.enqueue_many(
            [{"type": "test.ok"}, {"type": body["type"], **kwargs, "args": body["args"]}]
        )
    assert batch.value.details["index"] == 1
    if field and "x_custom" not in body and "options" not in body:
        renamed = field in ("timeout_ms", "visibility_timeout_ms")  # seconds in Python
        assert single.value.field == (field.removesuffix("_ms") if renamed else field)
    assert _count() == before


def test_integers_past_4300_digits_are_refused():
    digits = "9" * 4400  # Python's int<->str limit: JSON could not render it back
    raw = '{"type":"test.bad","args":[' + digits + "]}"
    assert_ojs_error(client("producer").post("/jobs", raw=raw), 400, "invalid_payload")
    with pytest.raises(ValidationError, match=r"args\[0\] has more than 4300 digits"):
        django_ojs.enqueue("test.bad", [10**4400])
    assert _count() == 0


def test_python_datetimes_and_timedeltas_out_of_range_are_refused():
    with pytest.raises(ValidationError, match="scheduled_at is out of range"):
        django_ojs.enqueue("test.bad", scheduled_at=timedelta.max)
    far_east = timezone(timedelta(hours=23))
    with pytest.raises(ValidationError, match="expires_at is out of range"):
        django_ojs.enqueue("test.bad", expires_at=datetime(1, 1, 1, tzinfo=far_east))
    with pytest.raises(ValidationError, match=r"retry\.max_attempts"):
        django_ojs.enqueue("test.bad", retry=django_ojs.RetryPolicy(max_attempts=10**12))
    assert _count() == 0


def test_rfc3339_offsets_beyond_15_59_are_stored_as_utc():
    # RFC 3339 allows offsets up to ±23:59; PostgreSQL refuses past ±15:59. Normalised.
    api = client("producer")
    response = api.post("/jobs", job(scheduled_at="2030-01-01T00:00:00+23:00"))
    assert response.status_code == 201, response.body
    assert response.body["job"]["scheduled_at"] == "2029-12-31T01:00:00.000Z"
    stored = Job.objects.get()
    assert stored.scheduled_at == datetime(2029, 12, 31, 1, tzinfo=UTC)


def test_years_below_1000_render_with_four_digits():
    api = client("producer")
    created = api.post("/jobs", job(expires_at="0058-01-17T10:00:00Z"))
    assert created.status_code == 201, created.body
    assert created.body["job"]["expires_at"] == "0058-01-17T10:00:00.000Z"
    assert envelope.format_timestamp(datetime(5, 3, 1, tzinfo=UTC)) == "0005-03-01T00:00:00.000Z"


# --------------------------------------------------------------------------- workers


@pytest.fixture
def active() -> str:
    django_ojs.enqueue("test.work")
    return str(lifecycle.fetch(["default"], worker_id="w1")[0].id)


WORKER_CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "fetch worker_id with NUL": (
        "/workers/fetch",
        {"queues": ["default"], "worker_id": NUL},
        "worker_id",
    ),
    "fetch visibility_timeout_ms 10^30": (
        "/workers/fetch",
        {"queues": ["default"], "visibility_timeout_ms": 10**30},
        "visibility_timeout_ms",
    ),
    "heartbeat worker_id with a surrogate": (
        "/workers/heartbeat",
        {"worker_id": SURROGATE},
        "worker_id",
    ),
    "heartbeat hostname with NUL": (
        "/workers/heartbeat",
        {"worker_id": "w9", "hostname": NUL},
        "hostname",
    ),
    "heartbeat pid 10^12": ("/workers/heartbeat", {"worker_id": "w9", "pid": 10**12}, "pid"),
    "heartbeat concurrency 2^31": (
        "/workers/heartbeat",
        {"worker_id": "w9", "concurrency": 2**31},
        "concurrency",
    ),
    "heartbeat labels with NUL": (
        "/workers/heartbeat",
        {"worker_id": "w9", "labels": [NUL]},
        "labels",
    ),
    "heartbeat visibility_timeout_ms 10^30": (
        "/workers/heartbeat",
        {"worker_id": "w9", "visibility_timeout_ms": 10**30},
        "visibility_timeout_ms",
    ),
    "progress message with NUL": (
        "/workers/progress",
        {"job_id": "0190d5d0-0000-7000-8000-000000000000", "percentage": 5, "message": NUL},
        "message",
    ),
}


@pytest.mark.parametrize(("path", "body", "field"), WORKER_CASES.values(), ids=WORKER_CASES.keys())
def test_worker_endpoints_refuse_unstorable_input(path: str, body: dict[str, Any], field: str):
    django_ojs.enqueue("test.work")
    response = client("worker").post(path, body)
    error = assert_ojs_error(response, 400, "invalid_payload")
    assert error["details"]["field"] == field
    assert Worker.objects.count() == 0
    assert Job.objects.get().state == "available"  # nothing claimed


def test_python_worker_calls_refuse_the_same_input():
    django_ojs.enqueue("test.work")
    calls: list[Callable[[], Any]] = [
        lambda: lifecycle.fetch(["default"], worker_id=NUL),
        lambda: lifecycle.fetch(["default"], visibility_timeout=1e30),
        lambda: lifecycle.beat(SURROGATE),
        lambda: lifecycle.beat("w9", hostname=NUL),
        lambda: lifecycle.beat("w9", pid=10**12),
        lambda: lifecycle.register("w9", labels=[NUL]),
        lambda: lifecycle.register("w9", concurrency=2**31),
    ]
    for call in calls:
        with pytest.raises(ValidationError):
            call()
    assert Worker.objects.count() == 0
    assert Job.objects.get().state == "available"


ACK_RESULTS = {
    "NUL": {"text": f"a{NUL}"},
    "surrogate key": {SURROGATE: 1},
    "nested 65 deep": nested(65),
}


@pytest.mark.parametrize("result", ACK_RESULTS.values(), ids=ACK_RESULTS.keys())
def test_an_ack_whose_result_cannot_be_stored_is_a_400_and_the_job_stays_active(
    active: str, result: Any
):
    # A retryable 5xx here made HTTP workers retry an ack that could never succeed.
    body = {"job_id": active, "result": result}
    error = assert_ojs_error(client("worker").post("/workers/ack", body), 400, "invalid_payload")
    assert error["retryable"] is False
    assert error["details"]["field"].startswith("result")
    with pytest.raises(ValidationError):
        lifecycle.ack(active, result)
    stored = Job.objects.get()
    assert (stored.state, stored.result) == ("active", None)


NACK_ERRORS = {
    "NUL in the message": {"message": NUL},
    "surrogate in details": {"message": "boom", "details": {"x": SURROGATE}},
    "NUL in the backtrace": {"message": "boom", "backtrace": [NUL]},
    "plain string with NUL": f"boom{NUL}",
    "details nested 500 deep": {"message": "boom", "details": {"x": nested(DEEP)}},
}


@pytest.mark.parametrize("error", NACK_ERRORS.values(), ids=NACK_ERRORS.keys())
def test_a_nack_whose_error_cannot_be_stored_is_a_400(active: str, error: Any):
    response = client("worker").post("/workers/nack", {"job_id": active, "error": error})
    assert_ojs_error(response, 400, "invalid_payload")
    with pytest.raises(ValidationError):
        lifecycle.fail(active, error)
    stored = Job.objects.get()
    assert (stored.state, stored.errors) == ("active", [])


# --------------------------------------------------------------------------- wire and API


def test_json_nested_thousands_deep_is_a_400_not_a_recursion_error():
    api = client("producer")
    for depth in (DEEP, 100_000):  # the second exhausts the C decoder's recursion limit
        raw = '{"type":"test.bad","args":' + "[" * depth + "]" * depth + "}"
        error = assert_ojs_error(api.post("/jobs", raw=raw), 400, "invalid_payload")
        assert "OJS_MAX_JSON_DEPTH" in error["message"]
    assert _count() == 0


def test_batch_bodies_are_bounded_too():
    raw = '{"jobs":[{"type":"test.bad","args":' + "[" * 2000 + "]" * 2000 + "}]}"
    assert_ojs_error(client("producer").post("/jobs/batch", raw=raw), 400, "invalid_payload")
    assert _count() == 0


@override_settings(OJS_MAX_JSON_DEPTH=3)
def test_the_depth_limit_is_a_setting():
    api = client("producer")
    assert api.post("/jobs", job(args=[[1]], meta={"a": {"b": 1}})).status_code == 201
    error = assert_ojs_error(api.post("/jobs", job(args=[[[[1]]]])), 400, "invalid_payload")
    assert error["message"] == "args is nested more than 3 levels deep"
    with pytest.raises(ValidationError, match="meta is nested more than 3 levels deep"):
        django_ojs.enqueue("test.bad", meta={"a": {"b": {"c": {}}}})
    assert _count() == 1


def test_dead_letter_offsets_beyond_int64_are_a_400():
    api = client("admin")
    for query in (f"offset={2**63}", f"limit=5&offset={10**30}"):
        error = assert_ojs_error(api.get(f"/dead-letter?{query}"), 400, "invalid_request")
        assert error["details"]["field"] == "offset"
    assert api.get(f"/dead-letter?offset={2**63 - 1}").status_code == 200


def test_a_filter_the_store_cannot_hold_is_not_a_5xx():
    # Query filters are not validated field by field: the DataError safety net answers.
    response = client("admin").get(f"/dead-letter?type=a{NUL}")
    assert response.status_code in (200, 400), response.body
    if response.status_code == 400:
        assert_ojs_error(response, 400, "invalid_request")


def test_a_data_error_reaching_the_api_is_a_400_invalid_request():
    response = exception_handler(DataError("integer out of range"), {})
    assert response.status_code == 400
    error = response.data["error"]
    assert (error["code"], error["retryable"]) == ("invalid_request", False)
    assert "integer out of range" not in error["message"]  # no database internals


def test_a_request_without_content_type_gets_a_clear_message():
    api = client("producer")
    response = api.client.generic(
        "POST",
        "/ojs/v1/jobs",
        data=b'{"type":"test.bad","args":[]}',
        content_type="",
        headers=api.headers,
    )
    response.body = response.json()
    error = assert_ojs_error(response, 400, "invalid_request")
    assert error["message"] == (
        "Content-Type is missing: send application/openjobspec+json or application/json."
    )
    other = api.post("/jobs", raw="x", content_type="text/plain")
    assert assert_ojs_error(other, 400, "invalid_request")["message"].startswith(
        "Content-Type 'text/plain' is not supported"
    )


def test_health_latency_is_an_integer():
    body = client(None).get("/health").body
    assert isinstance(body["backend"]["latency_ms"], int)


def test_an_error_message_echoing_a_surrogate_still_renders():
    override = {"override": {"queue": "default", SURROGATE: 1}}
    response = client("admin").post(
        f"/dead-letter/{'0190d5d0-0000-7000-8000-000000000000'}/retry", override
    )
    assert_ojs_error(response, 400, "invalid_payload")


def test_check_json_is_iterative():
    deep = nested(200_000)
    with pytest.raises(ValidationError, match="args is nested more than 64 levels deep"):
        validation.check_json(deep, "args")
    assert validation.json_depth_exceeds(deep, 64)


def test_an_enqueue_many_item_naming_an_unknown_option_is_a_validation_error():
    before = _count()
    with pytest.raises(ValidationError) as caught:
        lifecycle.enqueue_many(
            [{"type": "test.ok"}, {"type": "test.ok", "options": {"queue": "q"}}]
        )
    assert caught.value.field == "options" and caught.value.details["index"] == 1
    assert _count() == before
