"""Property: whatever JSON a client sends, the answer is never a 5xx, and a refusal stores nothing.

Hypothesis drives PUSH, PUSH batch, FETCH, ACK, NACK, BEAT and webhook subscriptions over
HTTP, and ``django_ojs.enqueue``, with random JSON in every field: NUL characters, lone
surrogates, integers past every column's range, deep nesting, and values of the wrong
type. Bounded (``max_examples``) so the module runs in seconds on either database.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import OJSError
from django_ojs.models import Job, WebhookSubscription, Worker
from tests.integration.api_support import OJSClient, client

pytestmark = pytest.mark.django_db

EXAMPLES = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --------------------------------------------------------------------------- strategies

nasty_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff", "\U0001f600", "", " "])
text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=12),  # surrogates included
    nasty_text,
)
big_ints = st.sampled_from(
    [2**31 - 1, 2**31, 2**53, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**12, 10**30, 10**300]
)
numbers = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40),
    big_ints,
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e300, -1e300, 5e-324, 0.5, -0.0]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def deep(draw: st.DrawFn) -> Any:
    value: Any = draw(scalars)
    for _ in range(draw(st.integers(min_value=1, max_value=300))):
        value = [value] if draw(st.booleans()) else {"k": value}
    return value


anything = st.one_of(json_values, deep())
durations = st.one_of(
    numbers, st.sampled_from(["PT1S", "P99999999Y", "+P99999999Y", "P" + "9" * 400 + "Y"]), anything
)
timestamps = st.one_of(
    st.sampled_from(
        [
            "2030-01-01T00:00:00Z",
            "2030-01-01T00:00:00+23:59",
            "9999-12-31T23:59:59-23:00",
            "0001-01-01T00:00:00+01:00",
            "0058-01-17T00:00:00Z",
            "+P99999999Y",
            "+PT1S",
        ]
    ),
    anything,
)
retry_policies = st.one_of(
    anything,
    st.fixed_dictionaries(
        {},
        optional={
            "max_attempts": st.one_of(big_ints, numbers, anything),
            "initial_interval": durations,
            "initial_interval_ms": durations,
            "max_interval": durations,
            "backoff_coefficient": numbers,
            "non_retryable_errors": st.one_of(st.lists(text, max_size=3), anything),
            "on_exhaustion": anything,
        },
    ),
)
known_fields = st.fixed_dictionaries(
    {
        "type": st.one_of(st.just("test.prop"), anything),
        "args": st.one_of(st.lists(anything), anything),
    },
    optional={
        "meta": anything,
        "queue": st.one_of(st.just("default"), anything),
        "priority": st.one_of(big_ints, anything),
        "tags": st.one_of(st.lists(text, max_size=3), anything),
        "schema": st.one_of(text, anything),
        "retry": retry_policies,
        "timeout": durations,
        "timeout_ms": durations,
        "visibility_timeout_ms": durations,
        "enqueue_ttl": durations,
        "scheduled_at": timestamps,
        "expires_at": timestamps,
        "x_custom": anything,
    },
)
# Unknown attributes are kept as they are (core §5.5.4): their keys and values are random too.
job_bodies = st.tuples(known_fields, st.dictionaries(text, anything, max_size=2)).map(
    lambda pair: {**pair[1], **pair[0]}
)


# --------------------------------------------------------------------------- helpers


def send(api: OJSClient, path: str, body: Any) -> Any:
    # json.dumps escapes surrogates as \ud800, exactly what a JSON client would send.
    raw = json.dumps(body)
    response = api.post(path, raw=raw)
    assert response.status_code < 500, (path, raw[:300], response.content[:500])
    if response.status_code >= 400:
        error = response.body["error"]
        assert error["retryable"] is False, error
    return response


def snapshot() -> tuple[int, int, list[tuple[str, str]]]:
    jobs = list(Job.objects.order_by("id").values_list("id", "state"))
    return Job.objects.count(), Worker.objects.count(), [(str(i), s) for i, s in jobs]


@pytest.fixture
def producer() -> OJSClient:
    return client("producer")


@pytest.fixture
def worker() -> OJSClient:
    return client("worker")


@pytest.fixture
def admin() -> OJSClient:
    return client("admin")


# --------------------------------------------------------------------------- properties


@EXAMPLES
@given(body=job_bodies)
def test_push_never_5xx_and_refusals_store_nothing(producer: OJSClient, body: dict[str, Any]):
    before = snapshot()
    response = send(producer, "/jobs", body)
    if response.status_code >= 400:
        assert snapshot() == before
    else:
        assert response.status_code == 201
        assert Job.objects.count() == before[0] + 1


@EXAMPLES
@given(bodies=st.lists(job_bodies, min_size=1, max_size=3), wrapper=st.booleans())
def test_batch_never_5xx_and_refusals_store_nothing(
    producer: OJSClient, bodies: list[Any], wrapper: bool
):
    before = snapshot()
    response = send(producer, "/jobs/batch", {"jobs": bodies} if wrapper else bodies)
    if response.status_code >= 400:
        assert snapshot() == before
    else:
        assert Job.objects.count() == before[0] + len(bodies)


@EXAMPLES
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "queues": st.one_of(st.just(["default"]), anything),
            "count": st.one_of(big_ints, anything),
            "worker_id": st.one_of(text, anything),
            "visibility_timeout_ms": durations,
            "visibility_timeout": durations,
        },
    )
)
def test_fetch_never_5xx_and_refusals_claim_nothing(worker: OJSClient, body: dict[str, Any]):
    django_ojs.enqueue("test.prop")
    before = snapshot()
    response = send(worker, "/workers/fetch", body)
    if response.status_code >= 400:
        assert snapshot() == before
    lifecycle.purge_all()


@pytest.fixture
def active_job() -> Any:
    def make() -> str:
        lifecycle.purge_all()
        django_ojs.enqueue("test.prop")
        return str(lifecycle.fetch(["default"], worker_id="prop-worker")[0].id)

    return make


@EXAMPLES
@given(
    result=anything,
    extra=st.dictionaries(st.sampled_from(["worker_id", "job_id"]), anything, max_size=1),
)
def test_ack_never_5xx_and_refusals_leave_the_job_active(
    worker: OJSClient, active_job: Any, result: Any, extra: dict[str, Any]
):
    job_id = active_job()
    response = send(worker, "/workers/ack", {"job_id": job_id, "result": result, **extra})
    stored = Job.objects.get(id=job_id)
    if response.status_code >= 400:
        assert (stored.state, stored.result) == ("active", None)
    else:
        assert stored.state == "completed"


@EXAMPLES
@given(
    error=st.one_of(
        anything,
        st.fixed_dictionaries(
            {},
            optional={
                "code": anything,
                "message": st.one_of(text, anything),
                "retryable": anything,
                "details": anything,
                "backtrace": st.one_of(st.lists(text, max_size=3), anything),
            },
        ),
    ),
    requeue=st.one_of(st.just(False), anything),
)
def test_nack_never_5xx_and_refusals_leave_the_job_active(
    worker: OJSClient, active_job: Any, error: Any, requeue: Any
):
    job_id = active_job()
    body = {"job_id": job_id, "error": error, "requeue": requeue}
    response = send(worker, "/workers/nack", body)
    stored = Job.objects.get(id=job_id)
    if response.status_code >= 400:
        assert (stored.state, stored.errors) == ("active", [])
    else:
        assert stored.state != "active"


@EXAMPLES
@given(
    body=st.fixed_dictionaries(
        {"worker_id": st.one_of(st.just("prop-beat"), text, anything)},
        optional={
            "hostname": st.one_of(text, anything),
            "pid": st.one_of(big_ints, anything),
            "concurrency": st.one_of(big_ints, anything),
            "labels": st.one_of(st.lists(text, max_size=3), anything),
            "queues": anything,
            "active_jobs": st.one_of(st.lists(text, max_size=3), anything),
            "state": anything,
            "visibility_timeout_ms": durations,
        },
    )
)
def test_heartbeat_never_5xx_and_refusals_store_nothing(worker: OJSClient, body: dict[str, Any]):
    before = snapshot()
    response = send(worker, "/workers/heartbeat", body)
    if response.status_code >= 400:
        assert snapshot() == before
    Worker.objects.all().delete()


OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "queue": anything,
        "priority": st.one_of(big_ints, anything),
        "meta": anything,
        "tags": anything,
        "schema": anything,
        "retry": retry_policies,
        "timeout": durations,
        "visibility_timeout": durations,
        "enqueue_ttl": durations,
        "scheduled_at": timestamps,
        "expires_at": timestamps,
        "unique": anything,
        "pending": anything,
        "id": anything,
    },
)


@EXAMPLES
@given(type_=st.one_of(st.just("test.prop"), anything), args=anything, options=OPTIONS)
def test_enqueue_raises_only_ojs_errors_and_refusals_store_nothing(
    type_: Any, args: Any, options: dict[str, Any]
):
    before = Job.objects.count()
    try:
        django_ojs.enqueue(type_, args, **options)
    except OJSError as exc:
        assert 400 <= exc.http_status < 500, exc
        assert Job.objects.count() == before
    else:
        assert Job.objects.count() == before + 1


webhook_bodies = st.fixed_dictionaries(
    {},
    optional={
        "url": st.one_of(
            st.sampled_from(
                [
                    "http://127.0.0.1:9/hook",
                    "https://localhost/hook",
                    "https://[::1]:8443/x?y=1",
                    "https://10.0.0.1/",
                    "https://example.invalid/",
                    "ftp://127.0.0.1/",
                    "https://u:p@127.0.0.1/",
                    "http://127.0.0.1:99999/",
                ]
            ),
            text,
            anything,
        ),
        "events": st.one_of(
            st.lists(st.sampled_from(["*", "job.*", "job.completed", "a..b", ""]), max_size=3),
            anything,
        ),
        "filter": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "queues": st.one_of(st.lists(text, max_size=2), anything),
                    "job_types": st.one_of(st.lists(text, max_size=2), anything),
                },
            ),
            anything,
        ),
        "metadata": anything,
        "active": anything,
        "secret": st.one_of(text, st.just("whsec_0123456789abcdef"), anything),
    },
)


@EXAMPLES
@given(body=webhook_bodies, private=st.booleans())
def test_webhook_subscription_never_5xx_and_refusals_store_nothing(
    admin: OJSClient, body: dict[str, Any], private: bool
):
    before = WebhookSubscription.objects.count()
    with override_settings(OJS_WEBHOOKS_ALLOW_PRIVATE=private, OJS_WEBHOOKS_ALLOW_HTTP=True):
        response = send(admin, "/webhooks/subscriptions", body)
    if response.status_code >= 400:
        assert WebhookSubscription.objects.count() == before
    else:
        assert response.status_code == 201 and private
        assert WebhookSubscription.objects.count() == before + 1
