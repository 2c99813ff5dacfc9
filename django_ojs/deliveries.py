"""Webhook deliveries: sending one event to one subscription, the ``ojs.webhook.deliver``
job handler, and the test ping.

A delivery is a job whose ``args`` are ``[subscription_id, event]``; its id is the
delivery id (``X-OJS-Delivery-ID: del_<job id>``), the same for every attempt (webhooks
§7.5). A 2xx completes it. 5xx, 429, timeouts and connection errors fail the attempt and
the job's retry policy (``OJS_WEBHOOKS_RETRY``) retries it; other answers (3xx: redirects
are not followed; 4xx) and refused addresses discard it at once (a dead delivery, in the
dead letter, §7.1-§7.2). A deleted or inactive subscription's pending deliveries complete
without sending anything.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

import django_ojs
from django_ojs import envelope, lifecycle
from django_ojs.conf import settings
from django_ojs.context import JobContext, JobError
from django_ojs.exceptions import ValidationError
from django_ojs.ids import uuid7
from django_ojs.models import WebhookSubscription
from django_ojs.webhooks import TEST_EVENT_TYPE, signing, transport
from django_ojs.webhooks.addresses import AddressRefused, Unresolvable

USER_AGENT = f"OJS-Webhook/1.0 (django-ojs {django_ojs.__version__})"
#: Characters of a response body kept in a job's error or a test's answer.
KEPT_BODY = 1000


@dataclass(frozen=True)
class Outcome:
    """What one attempt found: a status (or none) and whether to try again."""

    ok: bool
    status: int | None
    elapsed_ms: int
    body: str = ""
    error_type: str = ""
    message: str = ""
    retryable: bool = False

    def as_result(self) -> dict[str, Any]:
        return {"status_code": self.status, "response_time_ms": self.elapsed_ms}


def secrets_of(subscription: WebhookSubscription) -> list[str]:
    """The secrets that sign now: the current one, and the previous one in its grace."""
    out = [subscription.secret]
    expires = subscription.previous_secret_expires_at
    if subscription.previous_secret and expires is not None and expires > timezone.now():
        out.append(subscription.previous_secret)
    return out


def body_of(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


def send(subscription: WebhookSubscription, event: dict[str, Any], delivery_id: str) -> Outcome:
    """POST ``event`` to the subscription's URL, signed; classify what happened."""
    body = body_of(event)
    timestamp = int(time.time())
    headers = signing.headers(
        event_type=str(event.get("type", "")),
        delivery_id=delivery_id,
        subscription_id=subscription.public_id,
        timestamp=timestamp,
        signature=signing.signature_header(secrets_of(subscription), timestamp, body),
        user_agent=USER_AGENT,
    )
    started = time.monotonic()

    def failed(kind: str, message: str, *, retryable: bool) -> Outcome:
        elapsed = int((time.monotonic() - started) * 1000)
        return Outcome(False, None, elapsed, "", kind, message, retryable)

    try:
        response = transport.post(
            subscription.url,
            body,
            headers,
            timeout=settings.WEBHOOKS_TIMEOUT,
            max_bytes=settings.WEBHOOKS_MAX_RESPONSE_BYTES,
            allow_private=settings.WEBHOOKS_ALLOW_PRIVATE,
            allow_http=settings.WEBHOOKS_ALLOW_HTTP,
        )
    except (AddressRefused, ValidationError) as exc:
        return failed("webhook.address_refused", str(exc), retryable=False)
    except Unresolvable as exc:
        return failed("webhook.unresolvable", str(exc), retryable=True)
    except TimeoutError as exc:
        return failed("webhook.timeout", f"timed out: {exc}", retryable=True)
    except (OSError, http.client.HTTPException) as exc:
        return failed("webhook.connection_error", f"{type(exc).__name__}: {exc}", retryable=True)
    text = response.body.decode("utf-8", "replace")[:KEPT_BODY]
    status = response.status
    if 200 <= status < 300:
        return Outcome(True, status, response.elapsed_ms, text)
    if 300 <= status < 400:
        kind, retryable, message = "webhook.redirect", False, "redirects are not followed"
    elif status == 429:
        kind, retryable = "webhook.rate_limited", True
        message = f"rate limited (Retry-After: {response.retry_after or 'none'})"
    elif 400 <= status < 500:
        kind, retryable, message = "webhook.client_error", False, "client error: not retried"
    else:
        kind, retryable, message = "webhook.server_error", True, "server error"
    return Outcome(
        False, status, response.elapsed_ms, text, kind, f"HTTP {status}: {message}", retryable
    )


def deliver(ctx: JobContext, subscription_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """The ``ojs.webhook.deliver`` handler: one attempt of one delivery."""
    subscription = (
        WebhookSubscription.objects.using(settings.DATABASE).filter(pk=subscription_id).first()
    )
    if subscription is None or not subscription.active:
        reason = "deleted" if subscription is None else "inactive"
        return {"skipped": f"subscription {reason}"}
    outcome = send(subscription, event, f"del_{ctx.job_id}")
    lifecycle.record_webhook_delivery(subscription.id, outcome.status, ok=outcome.ok)
    if outcome.ok:
        return outcome.as_result()
    raise JobError(
        outcome.message,
        type=outcome.error_type,
        retryable=outcome.retryable,
        details={"status_code": outcome.status, "response_body": outcome.body},
    )


def ping(subscription: WebhookSubscription) -> dict[str, Any]:
    """Send a synthetic ``webhook.test`` event now and report (webhooks §6.6)."""
    now = timezone.now()
    event = {
        "specversion": envelope.SPECVERSION,
        "id": f"evt_{uuid7()}",
        "type": TEST_EVENT_TYPE,
        "source": settings.EVENT_SOURCE,
        "time": envelope.format_timestamp(now),
        "subject": subscription.public_id,
        "datacontenttype": "application/json",
        "data": {"subscription_id": subscription.public_id, "message": "ping"},
    }
    outcome = send(subscription, event, f"del_{uuid7()}")
    out: dict[str, Any] = {
        "success": outcome.ok,
        "status_code": outcome.status,
        "status": outcome.status,
        "response_time_ms": outcome.elapsed_ms,
        "response_body": outcome.body,
    }
    if not outcome.ok:
        out["error"] = {"type": outcome.error_type, "message": outcome.message}
    return out
