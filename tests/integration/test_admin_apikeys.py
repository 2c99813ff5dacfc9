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


def test_keys_are_not_edited_or_deleted(admin_client):
    key, _ = apikeys.create("ci", "producer")

    assert (
        admin_client.post(
            reverse("admin:ojs_apikey_change", args=[key.pk]), {"name": "x"}
        ).status_code
        == 403
    )
    assert (
        admin_client.post(
            reverse("admin:ojs_apikey_delete", args=[key.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_permissions__revoke_needs_change_apikey():
    key, raw = apikeys.create("ci", "producer")
    viewer = operator("ojs.view_apikey", username="viewer")
    revoker = operator("ojs.view_apikey", "ojs.change_apikey", username="revoker")

    assert viewer.get(LIST).context["action_form"] is None
    confirm(viewer, LIST, "revoke_keys", [key.pk])
    assert apikeys.authenticate(raw) == key
    assert viewer.get(reverse("admin:ojs_apikey_add")).status_code == 403

    assert messages_of(confirm(revoker, LIST, "revoke_keys", [key.pk])) == ["1 revoked"]
