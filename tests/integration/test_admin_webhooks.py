"""The webhook subscriptions admin: list, add (secret shown once), change, delete, actions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs.models import AuditEntry, WebhookSubscription
from django_ojs.webhooks import signing
from tests.factories import WebhookSubscriptionFactory
from tests.integration.admin_support import messages_of

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_webhooksubscription_changelist")
ADD = reverse("admin:ojs_webhooksubscription_add")


def form(url: str, **extra: str) -> dict[str, str]:
    return {
        "url": url,
        "events_text": "job.completed, job.*",
        "queues_text": "payments",
        "job_types_text": "",
        "active": "on",
        "metadata": "{}",
        **extra,
    }


def test_list__shows_subscriptions_without_secrets(admin_client):
    sub = WebhookSubscriptionFactory(events=["job.*"])
    html = admin_client.get(LIST).content.decode()
    assert sub.url in html and "job.*" in html
    assert sub.secret not in html


def test_add__through_the_lifecycle_with_the_secret_shown_once(
    admin_client, open_network, receiver
):
    response = admin_client.post(ADD, form(receiver.url), follow=True)
    assert response.status_code == 200
    sub = WebhookSubscription.objects.get()
    assert sub.events == ["job.completed", "job.*"] and sub.filter == {"queues": ["payments"]}
    assert any(sub.secret in m for m in messages_of(response))
    assert AuditEntry.objects.filter(action="webhook.create", actor="admin:admin").exists()
    change = reverse("admin:ojs_webhooksubscription_change", args=[sub.pk])
    assert sub.secret not in admin_client.get(change).content.decode()


def test_add__refuses_a_private_address_without_the_setting(admin_client, settings):
    settings.OJS_WEBHOOKS_ALLOW_HTTP = True
    response = admin_client.post(ADD, form("http://127.0.0.1:8000/hook"))
    assert response.status_code == 200
    assert "loopback" in str(response.context["adminform"].form.errors)
    assert not WebhookSubscription.objects.exists()


def test_add__refuses_bad_event_types(admin_client, open_network, receiver):
    response = admin_client.post(ADD, form(receiver.url, events_text="job.**"))
    assert response.context["adminform"].form.errors
    assert not WebhookSubscription.objects.exists()


def test_change__updates_through_the_lifecycle(admin_client, open_network, receiver):
    sub = WebhookSubscriptionFactory(url=receiver.url)
    change = reverse("admin:ojs_webhooksubscription_change", args=[sub.pk])
    response = admin_client.post(change, form(receiver.url, events_text="*", queues_text=""))
    assert response.status_code == 302
    sub.refresh_from_db()
    assert sub.events == ["*"] and sub.filter == {}
    assert AuditEntry.objects.filter(action="webhook.update").exists()


def test_delete__through_the_lifecycle(admin_client):
    sub = WebhookSubscriptionFactory()
    delete = reverse("admin:ojs_webhooksubscription_delete", args=[sub.pk])
    response = admin_client.post(delete, {"post": "yes"})
    assert response.status_code == 302
    assert not WebhookSubscription.objects.exists()
    assert AuditEntry.objects.filter(action="webhook.delete").exists()


def test_actions__rotate_and_test(admin_client, open_network, receiver):
    sub = WebhookSubscriptionFactory(url=receiver.url)
    old = sub.secret
    data = {"action": "rotate_secrets", "index": "0", "_selected_action": [str(sub.pk)]}
    response = admin_client.post(LIST, data, follow=True)
    sub.refresh_from_db()
    assert sub.secret != old and sub.previous_secret == old
    assert any(sub.secret in m for m in messages_of(response))

    data = {"action": "send_test_events", "index": "0", "_selected_action": [str(sub.pk)]}
    response = admin_client.post(LIST, data, follow=True)
    assert any("HTTP 200" in m for m in messages_of(response))
    [request] = receiver.requests
    assert request.json["type"] == "webhook.test"
    header = request.headers["x-ojs-signature"]
    assert signing.verify(sub.secret, request.headers["x-ojs-timestamp"], request.body, header)
    assert signing.verify(old, request.headers["x-ojs-timestamp"], request.body, header)
