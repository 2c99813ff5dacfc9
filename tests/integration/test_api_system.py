"""Manifest, health, the HTTP API's system checks and management commands."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

import django_ojs
from django_ojs import apikeys, checks
from django_ojs.models import ApiKey, Event, Job, Queue, Worker
from tests.factories import JobFactory, WorkerFactory
from tests.integration.api_support import OJSClient

pytestmark = pytest.mark.django_db


def test_manifest__union_of_the_binding_and_conformance_fields():
    response = OJSClient().get("/ojs/manifest")
    body = response.body
    assert response.status_code == 200 and response["OJS-Version"] == "1.0"
    assert body["specversion"] == "1.0" and body["ojs_version"] == "1.0"
    assert body["implementation"] == {
        "name": "django-ojs",
        "version": django_ojs.__version__,
        "language": "python",
    }
    assert body["conformance_level"] == 4 and body["conformance_tier"] == "runtime"
    assert body["protocols"] == ["http"] and body["backend"].startswith("django-orm:")
    assert body["capabilities"]["dead_letter"] is True
    assert body["capabilities"]["workflows"] is True
    # The official admin UI's names for its Pools and Tenants pages.
    assert body["capabilities"]["fair_scheduling"] is body["capabilities"]["multi_tenancy"] is True
    assert body["extensions"]["authentication"] == {"schemes": ["bearer"], "required": True}
    # Conformance §4.2.1: each official extension as {name, uri, version}.
    official = body["extensions"]["official"]
    assert {
        "name": "admin-api",
        "uri": "urn:ojs:ext:admin-api",
        "version": "1.0.0-rc.1",
    } in official
    assert {e["name"] for e in official} >= {"cron", "dead-letter", "rate-limiting", "workflows",
                                             "fair-scheduling"}  # fmt: skip
    assert all(e["uri"] == f"urn:ojs:ext:{e['name']}" and e["version"] for e in official)
    assert body["extensions"]["experimental"] == []
    assert body["endpoints"]["base_url"] == "http://testserver/ojs/v1"
    assert body["endpoints"]["manifest"] == "http://testserver/ojs/manifest"


def test_health__ok_with_backend_latency():
    body = OJSClient().get("/ojs/v1/health").body
    assert body["status"] == "ok" and body["version"] == "1.0"
    assert body["backend"]["status"] == "connected" and body["backend"]["latency_ms"] >= 0
    assert body["uptime_seconds"] >= 0


# --------------------------------------------------------------------------- checks


def ids(messages) -> list[str]:
    return [m.id for m in messages]


@override_settings(OJS_API_AUTH="none", DEBUG=False)
def test_check__auth_none_without_debug_warns():
    assert ids(checks.check_http_api()) == ["ojs.W002"]


@override_settings(OJS_API_AUTH="none", DEBUG=True)
def test_check__auth_none_with_debug_is_quiet():
    assert checks.check_http_api() == []


@override_settings(OJS_API_AUTH="token")
def test_check__unknown_auth_mode_is_an_error():
    assert ids(checks.check_http_api()) == ["ojs.E006"]


@override_settings(OJS_RESPONSE_CONTENT_TYPE="text/json")
def test_check__unknown_response_content_type_is_an_error():
    assert ids(checks.check_http_api()) == ["ojs.E007"]


@pytest.mark.parametrize("value", [0, -1, "1MB", 1.5, True])
def test_check__bad_request_limit_is_an_error(value):
    with override_settings(OJS_MAX_REQUEST_BYTES=value):
        assert ids(checks.check_http_api()) == ["ojs.E008"]


def test_check__defaults_are_clean():
    assert checks.check_http_api() == []


# --------------------------------------------------------------------------- commands


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_ojs_apikey__create_prints_the_key_once_and_it_works():
    out, err = run("ojs_apikey", "create", "billing", "--scope", "producer")
    raw = out.strip()
    stored = ApiKey.objects.get()
    assert raw.startswith(f"ojs_{stored.prefix}_") and "cannot be shown again" in err
    assert stored.scope == "producer" and raw not in stored.hashed_secret
    assert OJSClient(raw).post("/jobs", {"type": "a.b", "args": []}).status_code == 201


def test_ojs_apikey__list_shows_no_secrets():
    stored, raw = apikeys.create("ci", "worker")
    out, _ = run("ojs_apikey", "list")
    assert stored.prefix in out and "worker" in out and "active" in out and "ci" in out
    assert raw not in out


def test_ojs_apikey__create_with_queues_and_set_scope_and_queues():
    out, err = run(
        "ojs_apikey", "create", "orders", "--scope", "producer", "--queues", "orders,mail.*"
    )
    stored = ApiKey.objects.get(name="orders")
    assert stored.queues == ["orders", "mail.*"] and "queues: orders,mail.*" in err
    out, _ = run("ojs_apikey", "set", stored.prefix, "--scope", "operator", "--queues", "")
    stored.refresh_from_db()
    assert (stored.scope, stored.queues) == ("operator", [])
    assert "is now operator, queues: all" in out
    with pytest.raises(CommandError, match="Nothing to change"):
        run("ojs_apikey", "set", stored.prefix)
    with pytest.raises(CommandError, match="queues"):
        run("ojs_apikey", "set", stored.prefix, "--queues", "Bad Q")


def test_ojs_apikey__revoke():
    stored, raw = apikeys.create("ci", "worker")
    out, _ = run("ojs_apikey", "revoke", stored.prefix)
    assert "Revoked" in out
    assert ApiKey.objects.get().revoked_at is not None
    assert OJSClient(raw).get("/queues").status_code == 401
    with pytest.raises(CommandError, match="No API key"):
        run("ojs_apikey", "revoke", "000000000000")


def test_ojs_apikey__refuses_an_unknown_scope():
    with pytest.raises(CommandError):
        run("ojs_apikey", "create", "x", "--scope", "root")


def test_ojs_purge__all_yes_empties_the_job_store():
    JobFactory.create_batch(2)
    WorkerFactory()
    Queue.objects.create(name="email", paused=True)
    apikeys.create("kept", "admin")
    out, _ = run("ojs_purge", "--all", "--yes")
    assert "Deleted 2 jobs" in out
    assert not (Job.objects.exists() or Worker.objects.exists() or Queue.objects.exists())
    assert not Event.objects.exists() and ApiKey.objects.count() == 1


def test_ojs_purge__refuses_without_yes_when_not_interactive():
    JobFactory()
    with pytest.raises(CommandError, match="--yes"):
        run("ojs_purge", "--all")
    assert Job.objects.count() == 1
