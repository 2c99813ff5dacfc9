"""The API keys admin: list, create (key shown once), revoke, permissions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs import apikeys
from django_ojs.models import ApiKey
from tests.integration.admin_support import confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_apikey_changelist")


def test_list__shows_keys_without_secrets(admin_client):
    key, raw = apikeys.create("ci", "producer")

    html = admin_client.get(LIST).content.decode()

    assert f"ojs_{key.prefix}_…" in html and "producer" in html and "active" in html
    assert raw not in html and key.hashed_secret not in html


def test_add__shows_the_new_key_once(admin_client):
    response = admin_client.post(
        reverse("admin:ojs_apikey_add"), {"name": "worker box", "scope": "worker"}
    )

    assert response.status_code == 200
    raw = response.context["raw_key"]
    key = ApiKey.objects.get(name="worker box")
    assert raw.startswith(f"ojs_{key.prefix}_")
    assert apikeys.authenticate(raw) == key
    assert "no-store" in response["Cache-Control"]
    assert (
        raw
        not in admin_client.get(reverse("admin:ojs_apikey_change", args=[key.pk])).content.decode()
    )


def test_add__validates_the_form(admin_client):
    response = admin_client.post(reverse("admin:ojs_apikey_add"), {"name": "", "scope": "root"})

    assert response.status_code == 200 and response.context["adminform"].form.errors
    assert not ApiKey.objects.exists()


def test_revoke(admin_client):
    key, raw = apikeys.create("ci", "producer")
    old, _ = apikeys.create("old", "admin")
    apikeys.revoke(old)

    response = confirm(admin_client, LIST, "revoke_keys", [key.pk, old.pk])

    assert messages_of(response) == ["1 revoked; 1 skipped: already revoked (old)"]
    assert apikeys.authenticate(raw) is None


def test_scope_and_queues_change_but_name_and_secret_do_not(admin_client):
    key, raw = apikeys.create("ci", "producer")
    url = reverse("admin:ojs_apikey_change", args=[key.pk])

    response = admin_client.post(
        url, {"name": "renamed", "scope": "operator", "queues_text": "orders, mail.*"}
    )

    assert response.status_code == 302, response.content[:2000]
    key.refresh_from_db()
    assert (key.name, key.scope, key.queues) == ("ci", "operator", ["orders", "mail.*"])
    assert apikeys.authenticate(raw) == key
    assert "orders, mail.*" in admin_client.get(LIST).content.decode()


def test_change__validates_queues(admin_client):
    key, _ = apikeys.create("ci", "producer")
    response = admin_client.post(
        reverse("admin:ojs_apikey_change", args=[key.pk]),
        {"scope": "producer", "queues_text": "Bad Queue"},
    )
    assert response.status_code == 200 and response.context["adminform"].form.errors
    key.refresh_from_db()
    assert key.queues == []


def test_keys_are_not_deleted(admin_client):
    key, _ = apikeys.create("ci", "producer")

    assert (
        admin_client.post(
            reverse("admin:ojs_apikey_delete", args=[key.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_add__with_a_queue_allowlist(admin_client):
    admin_client.post(
        reverse("admin:ojs_apikey_add"),
        {"name": "orders", "scope": "producer", "queues_text": "orders"},
    )
    assert ApiKey.objects.get(name="orders").queues == ["orders"]


def test_permissions__revoke_needs_change_apikey():
    key, raw = apikeys.create("ci", "producer")
    viewer = operator("ojs.view_apikey", username="viewer")
    revoker = operator("ojs.view_apikey", "ojs.change_apikey", username="revoker")

    assert viewer.get(LIST).context["action_form"] is None
    confirm(viewer, LIST, "revoke_keys", [key.pk])
    assert apikeys.authenticate(raw) == key
    assert viewer.get(reverse("admin:ojs_apikey_add")).status_code == 403

    assert messages_of(confirm(revoker, LIST, "revoke_keys", [key.pk])) == ["1 revoked"]
