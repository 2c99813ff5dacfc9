"""Webhooks end to end on a real database and a real HTTP endpoint (OJS webhooks ext).

Events stored by the lifecycle become delivery jobs when the dispatcher runs (the reaper
calls it); each delivery job POSTs the signed event to the endpoint as the worker runs it
(:func:`~tests.integration.webhook_support.run_delivery`). The endpoint is an
``http.server`` on 127.0.0.1, so ``OJS_WEBHOOKS_ALLOW_PRIVATE`` is on where it is used.
"""

from __future__ import annotations

import hashlib
import hmac
import shutil
import ssl
import subprocess
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ojs import lifecycle, reaper
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import webhooks
from django_ojs.models import Event, WebhookCursor, WebhookSubscription
from django_ojs.webhooks import signing
from tests.factories import WebhookSubscriptionFactory
from tests.integration.webhook_support import (
    complete_a_job,
    deliveries,
    make_due,
    run_delivery,
    serving,
)

pytestmark = pytest.mark.django_db

SECRET = "whsec_test-secret-0123456789"


@pytest.fixture(autouse=True)
def _settle_gaps_at_once(monkeypatch):
    # A test's transaction rolls back without giving its sequence numbers back on
    # PostgreSQL: each test's first event comes after a gap, which is not waited for here.
    monkeypatch.setattr(webhooks, "GAP_WAIT", 0.0)


def subscribe(url: str, events: list[str] | None = None, **options) -> WebhookSubscription:
    return lifecycle.create_webhook(url, events or ["job.completed"], secret=SECRET, **options)


# ---------------------------------------------------------------- delivery


def test_delivery__a_signed_post_with_every_header(open_network, receiver):
    sub = subscribe(receiver.url)
    job = complete_a_job()
    assert lifecycle.dispatch_webhooks() == 1
    [delivery] = deliveries()
    assert delivery.queue == "ojs.webhooks" and delivery.state == "available"

    before = int(time.time())
    done = run_delivery()
    assert done is not None and done.state == "completed"
    assert done.result == {"status_code": 200, "response_time_ms": done.result["response_time_ms"]}
    [request] = receiver.requests
    headers = request.headers
    assert request.path == "/hooks/ojs"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("OJS-Webhook/1.0")
    assert headers["x-ojs-event-type"] == "job.completed"
    assert headers["x-ojs-delivery-id"] == f"del_{delivery.id}"
    assert headers["x-ojs-subscription-id"] == sub.public_id == f"sub_{sub.id}"
    assert before <= int(headers["x-ojs-timestamp"]) <= int(time.time())
    # Webhooks §8.1: HMAC-SHA256(secret, "<timestamp>.<body>"), as a receiver checks it.
    expected = hmac.new(
        SECRET.encode(), f"{headers['x-ojs-timestamp']}.".encode() + request.body, hashlib.sha256
    ).hexdigest()
    assert headers["x-ojs-signature"] == f"sha256={expected}"
    assert signing.verify(
        SECRET, headers["x-ojs-timestamp"], request.body, headers["x-ojs-signature"]
    )
    event = request.json
    assert event["specversion"] == "1.0" and event["type"] == "job.completed"
    assert event["id"].startswith("evt_") and event["subject"] == str(job.id)
    assert event["data"]["job_id"] == str(job.id) and event["data"]["queue"] == "default"
    sub.refresh_from_db()
    assert sub.last_delivery_status == 200 and sub.failure_count == 0


def test_delivery__the_delivery_id_is_the_same_on_every_attempt(open_network, receiver):
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = 503
    run_delivery()
    make_due()
    receiver.status = 200
    assert run_delivery().state == "completed"
    first, second = receiver.requests
    assert first.headers["x-ojs-delivery-id"] == second.headers["x-ojs-delivery-id"]


def test_delivery__a_server_error_retries_with_backoff_then_discards(
    open_network, receiver, settings
):
    settings.OJS_WEBHOOKS_RETRY = {"max_attempts": 2}
    sub = subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = 500
    receiver.body = b"boom"

    failed = run_delivery()
    assert failed.state == "retryable"
    assert failed.error["type"] == "webhook.server_error" and failed.error.get("retryable", True)
    assert failed.error["details"] == {"status_code": 500, "response_body": "boom"}
    # Webhooks §7.2: the second attempt about 30 s later (OJS_WEBHOOKS_RETRY; the jitter
    # draws from 0.5x to 1.5x).
    assert failed.error["retry_delay_ms"] == pytest.approx(30_000, rel=0.5)
    assert failed.next_attempt_at > timezone.now() + timedelta(seconds=5)
    assert run_delivery() is None  # not due yet

    make_due()
    dead = run_delivery()
    assert dead.state == "discarded" and dead.attempt == 2
    assert dead.dead_letter  # a dead delivery, kept for replay (webhooks §7.2)
    assert len(receiver.requests) == 2
    sub.refresh_from_db()
    assert sub.failure_count == 2 and sub.last_delivery_status == 500


@pytest.mark.parametrize(
    ("status", "state", "error_type"),
    [
        (400, "discarded", "webhook.client_error"),
        (410, "discarded", "webhook.client_error"),
        (429, "retryable", "webhook.rate_limited"),
        (502, "retryable", "webhook.server_error"),
    ],
)
def test_delivery__client_errors_are_not_retried(open_network, receiver, status, state, error_type):
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = status
    job = run_delivery()
    assert (job.state, job.error["type"]) == (state, error_type)
    assert job.dead_letter is (state == "discarded")


def test_delivery__redirects_are_not_followed(open_network, receiver):
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = 302
    receiver.headers = {"Location": receiver.url + "/elsewhere"}
    job = run_delivery()
    assert [r.path for r in receiver.requests] == ["/hooks/ojs"]
    assert job.state == "discarded" and job.error["type"] == "webhook.redirect"


def test_delivery__a_slow_endpoint_times_out_and_is_retried(open_network, receiver, settings):
    settings.OJS_WEBHOOKS_TIMEOUT = 0.3
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.answer.clear()  # the endpoint holds every request until the test ends
    job = run_delivery()
    assert job.state == "retryable" and job.error["type"] == "webhook.timeout"


def test_delivery__the_response_body_read_is_capped(open_network, receiver, settings):
    settings.OJS_WEBHOOKS_MAX_RESPONSE_BYTES = 100
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    receiver.status = 500
    receiver.body = b"x" * 1_000_000
    job = run_delivery()
    assert job.error["details"]["response_body"] == "x" * 100


def test_delivery__refused_when_the_address_is_no_longer_allowed(open_network, receiver, settings):
    subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    # The host now resolves to (or is) a private address: checked again at delivery.
    settings.OJS_WEBHOOKS_ALLOW_PRIVATE = False
    job = run_delivery()
    assert receiver.requests == []
    assert job.state == "discarded" and job.error["type"] == "webhook.address_refused"
    assert "loopback" in job.error["message"]


def test_delivery__an_inactive_subscription_sends_nothing(open_network, receiver):
    sub = subscribe(receiver.url)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    lifecycle.update_webhook(sub.public_id, {"active": False})
    job = run_delivery()
    assert job.state == "completed" and job.result == {"skipped": "subscription inactive"}
    assert receiver.requests == []


def test_rotate_secret__both_secrets_sign_during_the_grace_period(open_network, receiver, settings):
    sub = subscribe(receiver.url)
    rotated = lifecycle.rotate_webhook_secret(sub.id)
    assert rotated.secret != SECRET and rotated.previous_secret == SECRET
    complete_a_job()
    lifecycle.dispatch_webhooks()
    run_delivery()
    [request] = receiver.requests
    header, stamp = request.headers["x-ojs-signature"], request.headers["x-ojs-timestamp"]
    assert len(header.split(",")) == 2
    assert signing.verify(rotated.secret, stamp, request.body, header)
    assert signing.verify(SECRET, stamp, request.body, header)

    settings.OJS_WEBHOOKS_SECRET_GRACE = 0
    lifecycle.rotate_webhook_secret(sub.id)
    complete_a_job()
    lifecycle.dispatch_webhooks()
    run_delivery()
    latest = WebhookSubscription.objects.get(pk=sub.pk)
    header = receiver.requests[-1].headers["x-ojs-signature"]
    assert "," not in header
    assert header == signing.sign(
        latest.secret, receiver.requests[-1].headers["x-ojs-timestamp"], receiver.requests[-1].body
    )


# ---------------------------------------------------------------- dispatch


def test_dispatch__filters_by_type_queue_and_job_type(open_network):
    every = WebhookSubscriptionFactory(events=["*"])
    jobs_only = WebhookSubscriptionFactory(events=["job.*"])
    payments = WebhookSubscriptionFactory(events=["job.completed"], filter={"queues": ["payments"]})
    refunds = WebhookSubscriptionFactory(
        events=["job.completed"], filter={"job_types": ["payment.refund*", "payment.refund"]}
    )
    inactive = WebhookSubscriptionFactory(events=["*"], active=False)
    complete_a_job("email.send", "email")
    complete_a_job("payment.refund", "payments")
    lifecycle.pause_queue("email")
    lifecycle.dispatch_webhooks()

    def received(sub):
        return sorted(
            (j.args[1]["type"], j.args[1]["data"].get("job_type"))
            for j in deliveries()
            if j.args[0] == str(sub.id)
        )

    job_events = [
        (kind, job_type)
        for job_type in ("email.send", "payment.refund")
        for kind in ("job.completed", "job.enqueued", "job.started")
    ]
    assert received(every) == sorted([*job_events, ("queue.paused", None)])
    assert received(jobs_only) == sorted(job_events)
    assert received(payments) == [("job.completed", "payment.refund")]
    assert received(refunds) == [("job.completed", "payment.refund")]
    assert received(inactive) == []


def test_dispatch__each_event_once_and_never_the_deliveries_own(open_network, receiver):
    subscribe(receiver.url, ["*"])
    complete_a_job()
    assert lifecycle.dispatch_webhooks() == 3  # enqueued, started, completed
    assert lifecycle.dispatch_webhooks() == 0
    while run_delivery() is not None:
        pass
    assert len(receiver.requests) == 3
    # The deliveries' own job.* events are stored, and never delivered.
    assert Event.objects.filter(data__job_type="ojs.webhook.deliver").count() >= 9
    assert lifecycle.dispatch_webhooks() == 0
    assert WebhookCursor.objects.get().seq == Event.objects.order_by("-seq").first().seq


def test_dispatch__events_stored_before_a_subscription_are_not_sent(open_network):
    complete_a_job()
    WebhookSubscriptionFactory(events=["*"], since_seq=Event.objects.order_by("-seq")[0].seq)
    assert lifecycle.dispatch_webhooks() == 0
    complete_a_job()
    assert lifecycle.dispatch_webhooks() == 3


def test_dispatch__waits_for_a_missing_event_then_settles_it(open_network, monkeypatch):
    WebhookSubscriptionFactory(events=["job.*"])
    complete_a_job()
    lifecycle.dispatch_webhooks()  # past the gap this test starts after (PostgreSQL)
    before = len(deliveries())
    monkeypatch.setattr(webhooks, "GAP_WAIT", 3600.0)
    job = complete_a_job()
    started = Event.objects.get(job_id=job.id, type="job.started")
    missing = started.seq
    # As a transaction that took this seq and has not committed yet (or rolled back).
    started.delete()
    assert lifecycle.dispatch_webhooks() == 1  # job.enqueued only: the gap stops the rest
    assert WebhookCursor.objects.get().seq == missing - 1
    assert lifecycle.dispatch_webhooks() == 0  # still waiting for it
    # Past the wait, the driver says which sequence numbers are settled: it is gone.
    monkeypatch.setattr(webhooks, "GAP_WAIT", 0.0)
    assert lifecycle.dispatch_webhooks() == 1
    assert [j.args[1]["type"] for j in deliveries()[before:]] == ["job.enqueued", "job.completed"]


def test_dispatch__nothing_runs_without_subscriptions(settings):
    settings.OJS_WEBHOOKS_CACHE_SECONDS = 60
    assert lifecycle.dispatch_webhooks() == 0  # asks once, and remembers
    with CaptureQueriesContext(connection) as queries:
        complete_a_job()  # enqueue, fetch, ACK: nothing about webhooks
    assert queries.captured_queries
    assert not [q for q in queries if "webhook" in q["sql"]]
    with CaptureQueriesContext(connection) as queries:
        assert lifecycle.dispatch_webhooks() == 0
    assert queries.captured_queries == []  # the reaper's step: not even a look
    assert deliveries() == []


def test_dispatch__the_reaper_runs_it(open_network):
    WebhookSubscriptionFactory(events=["job.completed"])
    complete_a_job()
    result = reaper.run_once()
    assert result.webhooks == 1 and len(deliveries()) == 1


def test_create__refuses_private_addresses_without_the_setting(settings):
    settings.OJS_WEBHOOKS_ALLOW_HTTP = True
    for url in (
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://[::1]/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[fe80::1]/hook",
        "http://0.0.0.0/hook",
    ):
        with pytest.raises(ValidationError) as info:
            lifecycle.create_webhook(url, ["*"])
        assert info.value.field == "url", url
    assert not WebhookSubscription.objects.exists()


def test_create__refuses_http_unless_allowed(settings):
    settings.OJS_WEBHOOKS_ALLOW_PRIVATE = True
    with pytest.raises(ValidationError, match="https"):
        lifecycle.create_webhook("http://127.0.0.1/hook", ["*"])
    settings.OJS_WEBHOOKS_ALLOW_HTTP = True
    assert lifecycle.create_webhook("http://127.0.0.1/hook", ["*"]).secret.startswith("whsec_")


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_worker__an_ojs_worker_on_the_webhook_queue_delivers(open_network, receiver, wait_until):
    """The whole path with the real worker: event → reaper pass → job → worker → POST."""
    from django_ojs.registry import registry
    from django_ojs.worker import Worker

    sub = subscribe(receiver.url)
    job = complete_a_job()
    assert reaper.run_once().webhooks == 1
    worker = Worker(
        queues=["ojs.webhooks"],
        concurrency=2,
        poll_interval=0.05,
        heartbeat_interval=0.2,
        run_reaper=False,
        shutdown_grace_period=2.0,
        handlers=registry,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: deliveries(state="completed"), timeout=60)
    finally:
        worker.terminate()
        thread.join(60)
    assert not thread.is_alive()
    [request] = receiver.requests
    assert request.json["data"]["job_id"] == str(job.id)
    assert request.headers["x-ojs-subscription-id"] == sub.public_id
    assert signing.verify(
        SECRET,
        request.headers["x-ojs-timestamp"],
        request.body,
        request.headers["x-ojs-signature"],
    )


@pytest.fixture
def certificate(tmp_path):
    """A self-signed certificate for ``localhost`` (made with the openssl command)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    return cert, tls


def test_https__the_certificate_is_verified_for_the_url_s_host(certificate, settings, monkeypatch):
    """Deliveries connect to the address they checked, and TLS still verifies the host
    name of the URL (SNI and certificate): an untrusted certificate fails the attempt."""
    cert, tls = certificate
    settings.OJS_WEBHOOKS_ALLOW_PRIVATE = True
    with serving(tls) as endpoint:
        subscribe(endpoint.url)
        complete_a_job()
        lifecycle.dispatch_webhooks()
        refused = run_delivery()
        assert refused.state == "retryable"
        assert refused.error["type"] == "webhook.connection_error"
        assert "CERTIFICATE_VERIFY_FAILED" in refused.error["message"]
        assert endpoint.requests == []

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # now trusted (read per delivery)
        make_due()
        delivered = run_delivery()
        assert delivered.state == "completed", delivered.error
        [request] = endpoint.requests
        assert request.headers["host"] == endpoint.url.split("/")[2]


def test_dispatch__an_event_too_large_for_a_job_is_skipped_not_stuck(
    open_network, settings, caplog
):
    WebhookSubscriptionFactory(events=["job.completed"])
    lifecycle.dispatch_webhooks()  # past the gap this test starts after (PostgreSQL)
    big = lifecycle.enqueue("test.echo", [], queue="default")
    lifecycle.fetch(["default"], 1)
    lifecycle.ack(big.id, {"blob": "x" * 5000})
    complete_a_job()
    settings.OJS_MAX_ENVELOPE_BYTES = 4000
    assert lifecycle.dispatch_webhooks() == 1
    [delivery] = deliveries()
    assert delivery.args[1]["data"]["job_id"] != str(big.id)
    assert "not sent to webhook" in caplog.text
