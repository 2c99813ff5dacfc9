"""A key revoked by another process (``manage.py ojs_apikey revoke``) stops working within
``OJS_API_KEY_CACHE_SECONDS`` in a web process that had verified it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_ojs import apikeys
from django_ojs.models import ApiKey
from tests.acceptance.conftest import wait_for
from tests.clock import ManualClock
from tests.integration.api_support import OJSClient, assert_ojs_error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@override_settings(OJS_API_KEY_CACHE_SECONDS=5)
def test_key_revoked_by_another_process__refused_once_the_bound_passes(processes, monkeypatch):
    clock = ManualClock()
    monkeypatch.setattr(apikeys, "_clock", clock)
    apikeys.forget()
    stored, raw = apikeys.create("revoked-elsewhere", "worker")
    api = OJSClient(raw)
    assert api.post("/workers/fetch", {"queues": ["default"]}).status_code == 200

    revoker = processes.start(["ojs_apikey", "revoke", stored.prefix], {})
    assert revoker.wait(120) == 0, revoker.output()
    wait_for(lambda: not ApiKey.objects.get(pk=stored.pk).is_active, timeout=30)

    # This process verified the key less than the bound ago: it has not read the row since.
    assert api.post("/workers/fetch", {"queues": ["default"]}).status_code == 200
    clock.now += 5
    assert_ojs_error(api.post("/workers/fetch", {"queues": ["default"]}), 401, "unauthenticated")
