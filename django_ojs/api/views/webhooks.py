"""Webhook endpoints (OJS webhooks §10): subscriptions, their test and secret rotation, and
the deliveries (jobs of type ``ojs.webhook.deliver``).

Every endpoint is the ``admin`` operation: a subscription sends the server's events to a
URL of the caller's choosing. A subscription's ``secret`` is shown only when it is made
and when it is rotated (webhooks §6.1). PUT is read as PATCH (the OJS admin UI sends PUT).
"""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework.response import Response

from django_ojs import lifecycle
from django_ojs.api import pagination
from django_ojs.api.permissions import MANAGE
from django_ojs.api.serializers import ts
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.deliveries import ping
from django_ojs.exceptions import JobNotFound, ValidationError
from django_ojs.models import Job, WebhookSubscription
from django_ojs.states import JobState
from django_ojs.webhooks import DELIVER_TYPE

STATE_NAMES = [str(s) for s in JobState]
CREATE_FIELDS = {"url", "events", "filter", "metadata", "active", "secret"}


def render(subscription: WebhookSubscription, *, secret: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": subscription.public_id,
        "url": subscription.url,
        "events": subscription.events,
        "filter": subscription.filter or None,
        "active": subscription.active,
        "metadata": subscription.metadata,
        "created_at": ts(subscription.created_at),
        "updated_at": ts(subscription.updated_at),
        "last_delivery_at": ts(subscription.last_delivery_at)
        if subscription.last_delivery_at
        else None,
        "last_delivery_status": subscription.last_delivery_status,
        "failure_count": subscription.failure_count,
    }
    if secret:
        out["secret"] = subscription.secret
    return out


def _delivery_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value.removeprefix("del_"))
    except ValueError:
        raise JobNotFound(value, f"Webhook delivery '{value}' not found.") from None


def _delivery(job: Job) -> dict[str, Any]:
    webhook = (job.meta or {}).get("webhook") or {}
    error = job.error or None
    result = job.result if isinstance(job.result, dict) else {}
    status = result.get("status_code")
    if status is None and isinstance(error, dict):
        status = (error.get("details") or {}).get("status_code")
    return {
        "id": f"del_{job.id}",
        "job_id": str(job.id),
        "subscription_id": webhook.get("subscription_id"),
        "event_id": webhook.get("event_id"),
        "event_type": webhook.get("event_type"),
        "state": str(job.state),
        "dead": job.state == JobState.DISCARDED,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "status_code": status,
        "response_time_ms": result.get("response_time_ms"),
        "last_error": error,
        "created_at": ts(job.created_at),
        "next_attempt_at": ts(job.next_attempt_at) if job.next_attempt_at else None,
        "completed_at": ts(job.completed_at) if job.completed_at else None,
    }


def _deliveries() -> Any:
    return Job.objects.using(settings.DATABASE).filter(type=DELIVER_TYPE)


class WebhookSubscriptionListView(OJSView):
    """``GET`` (list) and ``POST`` (create, §6.1) ``/ojs/v1/webhooks/subscriptions``."""

    operation = MANAGE

    def get(self, request: Any) -> Response:
        page = pagination.page(request.query_params)
        found = WebhookSubscription.objects.using(settings.DATABASE).order_by("created_at", "id")
        chunk, meta = pagination.offset_page(found, found.count(), page)
        items = [render(s) for s in chunk]
        return Response({"items": items, "subscriptions": items, "pagination": meta})

    def post(self, request: Any) -> Response:
        body = self.body(request)
        unknown = sorted(set(body) - CREATE_FIELDS)
        if unknown:
            raise ValidationError(f"unknown field {unknown[0]}", field=unknown[0])
        subscription = lifecycle.create_webhook(
            body.get("url"),
            body.get("events"),
            filter=body.get("filter"),
            metadata=body.get("metadata"),
            active=body.get("active", True),
            secret=body.get("secret"),
            actor=self.actor(request),
        )
        return Response(
            render(subscription, secret=True),
            status=201,
            headers={"Location": self.location("webhook-detail", subscription.public_id)},
        )


class WebhookSubscriptionDetailView(OJSView):
    """``GET``, ``PATCH`` (PUT alike) and ``DELETE`` ``/ojs/v1/webhooks/subscriptions/{id}``."""

    operation = MANAGE

    def get(self, request: Any, subscription_id: str) -> Response:
        return Response(render(lifecycle.get_webhook(subscription_id)))

    def patch(self, request: Any, subscription_id: str) -> Response:
        subscription = lifecycle.update_webhook(
            subscription_id, self.body(request), actor=self.actor(request)
        )
        return Response(render(subscription))

    def put(self, request: Any, subscription_id: str) -> Response:
        return self.patch(request, subscription_id)

    def delete(self, request: Any, subscription_id: str) -> Response:
        lifecycle.delete_webhook(subscription_id, actor=self.actor(request))
        return Response(
            {"deleted": True, "id": f"sub_{lifecycle.parse_webhook_id(subscription_id)}"}
        )


class WebhookTestView(OJSView):
    """``POST …/subscriptions/{id}/test``: send a ``webhook.test`` event now (§6.6)."""

    operation = MANAGE

    def post(self, request: Any, subscription_id: str) -> Response:
        return Response(ping(lifecycle.get_webhook(subscription_id)))


class WebhookRotateSecretView(OJSView):
    """``POST …/subscriptions/{id}/rotate-secret``: a new secret (§8.3), shown once."""

    operation = MANAGE

    def post(self, request: Any, subscription_id: str) -> Response:
        subscription = lifecycle.rotate_webhook_secret(subscription_id, actor=self.actor(request))
        body = render(subscription, secret=True)
        expires = subscription.previous_secret_expires_at
        body["previous_secret_expires_at"] = ts(expires) if expires else None
        return Response(body)


class WebhookDeliveryListView(OJSView):
    """``GET /ojs/v1/webhooks/deliveries?subscription_id=&state=``: newest first."""

    operation = MANAGE

    def get(self, request: Any) -> Response:
        params = request.query_params
        page = pagination.page(params)
        jobs = _deliveries()
        if params.get("subscription_id"):
            sub_id = lifecycle.parse_webhook_id(params["subscription_id"])
            jobs = jobs.filter(meta__webhook__subscription_id=f"sub_{sub_id}")
        if params.get("state"):
            if params["state"] not in STATE_NAMES:
                raise ValidationError(
                    f"state must be one of {', '.join(STATE_NAMES)}", field="state"
                )
            jobs = jobs.filter(state=params["state"])
        jobs = jobs.order_by("-created_at", "-id")
        chunk, meta = pagination.offset_page(jobs, jobs.count(), page)
        items = [_delivery(j) for j in chunk]
        return Response({"items": items, "deliveries": items, "pagination": meta})


class WebhookDeliveryDetailView(OJSView):
    """``GET /ojs/v1/webhooks/deliveries/{id}`` (``del_<job id>`` or the job id)."""

    operation = MANAGE

    def get(self, request: Any, delivery_id: str) -> Response:
        job = _deliveries().filter(pk=_delivery_id(delivery_id)).first()
        if job is None:
            raise JobNotFound(delivery_id, f"Webhook delivery '{delivery_id}' not found.")
        return Response(_delivery(job))


class WebhookDeliveryRetryView(OJSView):
    """``POST …/deliveries/{id}/retry``: send a dead delivery again (its job, from the dead
    letter)."""

    operation = MANAGE

    def post(self, request: Any, delivery_id: str) -> Response:
        job_id = _delivery_id(delivery_id)
        if not _deliveries().filter(pk=job_id).exists():
            raise JobNotFound(delivery_id, f"Webhook delivery '{delivery_id}' not found.")
        # A delivery that is not dead (discarded) is a 409 conflict.
        job = lifecycle.retry_discarded(job_id, actor=self.actor(request))
        return Response(_delivery(job))
