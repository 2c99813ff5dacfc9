"""Maintenance mode (admin API §12.1): the HTTP switch, fetches that get nothing while it is
on, enqueues still accepted, promotion and cron paused, the audit trail, the admin and the
management command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

import django_ojs
from django_ojs import envelope, lifecycle, reaper
from django_ojs.lifecycle import system
from django_ojs.models import AuditEntry, Job
from tests.integration.admin_support import messages_of, operator
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

M = "/admin/system/maintenance"
OFF = {
    "maintenance": False, "reason": None, "enabled_at": None, "estimated_end": None,
    "enabled": False, "started_at": None, "ends_at": None,
}  # fmt: skip


@pytest.fixture
def api(db):
    return client("admin")


def test_http__round_trip_on_then_off(api):
    assert api.get(M).body == OFF

    on = api.post(M, {"enabled": True, "reason": "DB upgrade", "estimated_duration": "PT30M"})

    assert on.status_code == 200, on.body
    assert on.body["maintenance"] is True and on.body["reason"] == "DB upgrade"
    enabled_at = envelope.parse_timestamp(on.body["enabled_at"], "enabled_at")
    end = envelope.parse_timestamp(on.body["estimated_end"], "estimated_end")
    assert end - enabled_at == timedelta(minutes=30)
    assert api.get(M).body == on.body
    assert api.get("/admin/system/config").body["maintenance"] is True

    off = api.post(M, {"enabled": False})

    assert off.status_code == 200
    assert off.body == OFF
    assert api.get(M).body["maintenance"] is False


def test_http__the_official_admin_uis_names_too(api):
    """The OJS admin UI sends {enabled, reason, duration} and reads enabled, started_at
    and ends_at."""
    on = api.post(M, {"enabled": True, "reason": "ui", "duration": "PT5M"}).body

    assert on["enabled"] is True and on["started_at"] == on["enabled_at"]
    assert on["ends_at"] == on["estimated_end"] is not None
    both = api.post(M, {"enabled": True, "duration": "PT5M", "estimated_duration": "PT5M"})
    assert_ojs_error(both, 400)


def test_http__switching_on_again_keeps_enabled_at(api):
    first = api.post(M, {"enabled": True, "reason": "one"}).body
    second = api.post(M, {"enabled": True, "reason": "two"}).body

    assert second["enabled_at"] == first["enabled_at"] and second["reason"] == "two"


def test_http__fetch_while_on_gets_nothing_then_the_job_after_off(db):
    admin, worker, producer = client("admin"), client("worker"), client("producer")
    admin.post(M, {"enabled": True})

    created = producer.post("/jobs", {"type": "test.echo", "args": [1]})

    # §12.1: enqueue operations continue to accept jobs (queuing for later).
    assert created.status_code == 201
    assert worker.fetch() == []
    assert Job.objects.get().state == "available"

    admin.post(M, {"enabled": False})

    (job,) = worker.fetch()
    assert job["id"] == created.body["job"]["id"] and job["state"] == "active"


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "enabled"),
        ({"enabled": "yes"}, "enabled"),
        ({"enabled": True, "reason": 5}, "reason"),
        ({"enabled": True, "reason": "x" * 501}, "reason"),
        ({"enabled": True, "estimated_duration": "soon"}, "estimated_duration"),
        ({"enabled": True, "estimated_duration": -1}, "estimated_duration"),
        ({"enabled": False, "estimated_duration": "PT1M"}, "estimated_duration"),
        ({"enabled": True, "until": "later"}, "until"),
    ],
)
def test_http__bad_bodies_are_400_envelopes(api, body, field):
    response = api.post(M, body)

    assert_ojs_error(response, 400)
    assert response.body["error"]["details"]["field"] == field
    assert api.get(M).body["maintenance"] is False


def test_http__needs_the_admin_scope(db):
    assert_ojs_error(client("operator").post(M, {"enabled": True}), 403)
    assert_ojs_error(client("worker").get(M), 403)
    assert client(None).get(M).status_code == 401
    assert lifecycle.maintenance_status().enabled is False


def test_switch__is_audited_with_the_caller(api):
    api.post(M, {"enabled": True, "reason": "upgrade"})
    api.post(M, {"enabled": False})

    entries = list(AuditEntry.objects.filter(action="system.maintenance").order_by("id"))

    assert [e.detail["enabled"] for e in entries] == [True, False]
    assert entries[0].detail["reason"] == "upgrade" and entries[0].source == "http"
    assert entries[0].actor.startswith("apikey:test-admin")


def test_fetch__in_process_worker_path_gets_nothing_while_on(db):
    job = django_ojs.enqueue("test.echo", [1])
    lifecycle.set_maintenance(True)
    fetch = lifecycle.Fetch(["default"], worker_id="w-1", register=False)

    assert fetch(10) == []
    assert lifecycle.fetch(["default", "other"], 10, worker_id="w-1") == []

    lifecycle.set_maintenance(False)

    assert [j.id for j in fetch(10)] == [job.id]


def test_cache__another_process_switch_is_seen_within_the_bound(db, settings, monkeypatch):
    """A switch written by another process (here: the row written behind the cache's back)
    is seen once the cached value is ``OJS_MAINTENANCE_CACHE_SECONDS`` old."""
    settings.OJS_MAINTENANCE_CACHE_SECONDS = 2.0
    clock = [1000.0]
    monkeypatch.setattr(system, "_clock", lambda: clock[0])
    assert lifecycle.in_maintenance() is False
    lifecycle.set_maintenance(True)  # forgets this process's cached value...
    system._cache["default"] = (clock[0], False)  # ...as if it were read just before

    assert lifecycle.in_maintenance() is False  # still cached
    clock[0] += 2.0
    assert lifecycle.in_maintenance() is True


def test_cache__zero_reads_every_time(db, settings):
    settings.OJS_MAINTENANCE_CACHE_SECONDS = 0
    assert lifecycle.in_maintenance() is False
    system.Maintenance.objects.create(enabled=True)

    assert lifecycle.in_maintenance() is True
    assert system._cache == {}


def test_reaper__promotes_nothing_and_fires_no_cron_while_on(db):
    past = timezone.now() - timedelta(seconds=5)
    job = django_ojs.enqueue("test.echo", [1], scheduled_at=timezone.now() + timedelta(hours=1))
    Job.objects.filter(pk=job.pk).update(scheduled_at=past)
    lifecycle.register_cron("nightly", "* * * * *", "test.echo")
    from django_ojs.models import CronJob

    CronJob.objects.filter(pk="nightly").update(next_run_at=past)
    lifecycle.set_maintenance(True)

    paused = reaper.run_once()

    assert paused.promoted == 0 and paused.cron_fired == 0
    assert Job.objects.get(pk=job.pk).state == "scheduled"
    assert Job.objects.count() == 1

    lifecycle.set_maintenance(False)
    resumed = reaper.run_once()

    assert resumed.promoted == 1 and resumed.cron_fired == 1
    assert Job.objects.get(pk=job.pk).state == "available"


def test_command__on_status_off(db):
    out = StringIO()
    call_command("ojs_maintenance", "on", "--reason", "disk swap", "--duration", "PT1H", stdout=out)

    assert "Maintenance mode is on" in out.getvalue() and "disk swap" in out.getvalue()
    status = lifecycle.maintenance_status()
    assert status.enabled and status.estimated_end - status.enabled_at == timedelta(hours=1)
    entry = AuditEntry.objects.get(action="system.maintenance")
    assert entry.source == "command" and entry.actor.startswith("command:")

    out = StringIO()
    call_command("ojs_maintenance", "status", stdout=out)
    assert "Maintenance mode is on" in out.getvalue()

    out = StringIO()
    call_command("ojs_maintenance", "off", stdout=out)
    assert out.getvalue().strip() == "Maintenance mode is off."
    assert lifecycle.maintenance_status().enabled is False


def test_command__seconds_duration_and_bad_duration(db):
    call_command("ojs_maintenance", "on", "--duration", "90", stdout=StringIO())
    status = lifecycle.maintenance_status()
    assert status.estimated_end - status.enabled_at == timedelta(seconds=90)

    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="estimated_duration"):
        call_command("ojs_maintenance", "on", "--duration", "soon", stdout=StringIO())


DASHBOARD = reverse("admin:ojs_dashboard_changelist")
SWITCH = reverse("admin:ojs_dashboard_maintenance")


def test_admin__dashboard_shows_and_switches_maintenance(admin_client):
    html = admin_client.get(DASHBOARD).content.decode()
    assert "Maintenance mode is off." in html and 'value="Switch maintenance mode on"' in html

    response = admin_client.post(
        SWITCH, {"enabled": "on", "reason": "upgrade", "duration": "PT15M"}, follow=True
    )

    assert "Maintenance mode is on:" in " ".join(messages_of(response))
    html = response.content.decode()
    assert "<strong>Maintenance mode is on</strong>" in html and "Reason: upgrade" in html
    assert 'value="Switch maintenance mode off"' in html
    entry = AuditEntry.objects.get(action="system.maintenance")
    assert entry.source == "admin" and entry.actor == "admin:admin"

    response = admin_client.post(SWITCH, {"enabled": "off"}, follow=True)

    assert "Maintenance mode is off" in " ".join(messages_of(response))
    assert lifecycle.maintenance_status().enabled is False


def test_admin__bad_duration_is_a_message_not_a_500(admin_client):
    response = admin_client.post(SWITCH, {"enabled": "on", "duration": "soon"}, follow=True)

    assert response.status_code == 200
    assert any("estimated_duration" in m for m in messages_of(response))
    assert lifecycle.maintenance_status().enabled is False


def test_admin__switch_needs_its_permission(db):
    viewer = operator("ojs.view_job")
    html = viewer.get(DASHBOARD).content.decode()
    assert "Maintenance mode is off." in html and "Switch maintenance mode" not in html

    assert viewer.post(SWITCH, {"enabled": "on"}).status_code == 403
    assert viewer.get(SWITCH).status_code == 405
    assert lifecycle.maintenance_status().enabled is False

    switcher = operator("ojs.view_job", "ojs.switch_maintenance", username="switcher")
    assert switcher.post(SWITCH, {"enabled": "on"}).status_code == 302
    assert lifecycle.maintenance_status().enabled is True


def test_http__a_reason_the_store_cannot_hold_is_a_400(api):
    assert_ojs_error(api.post(M, {"enabled": True, "reason": "a\u0000b"}), 400)
    assert lifecycle.maintenance_status().enabled is False
