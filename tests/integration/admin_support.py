"""Helpers for the admin tests: operators with chosen permissions, and two-step actions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client


def operator(*perms: str, username: str = "operator") -> Client:
    """A logged-in staff user holding exactly ``perms`` (``"ojs.retry_job"``, …)."""
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def ask(client: Client, url: str, action: str, keys: list[Any], **extra: Any) -> Any:
    """Choose ``action`` for ``keys`` on a changelist: the first step (confirmation page)."""
    data = {"action": action, "index": "0", "_selected_action": [str(k) for k in keys], **extra}
    return client.post(url, data)


def confirm(client: Client, url: str, action: str, keys: list[Any]) -> Any:
    """The confirmation page's "Yes": run ``action`` for ``keys``, following the redirect."""
    data = {"action": action, "post": "yes", "_selected_action": [str(k) for k in keys]}
    return client.post(url, data, follow=True)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]
