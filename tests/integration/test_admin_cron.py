"""The cron admin: list, add and edit through the lifecycle, pause/resume/run now, delete."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.models import AuditEntry, CronJob, Job
from tests.integration.admin_support import ask, confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_cronjob_changelist")


def _entry(name="nightly"):
    entry, _ = lifecycle.register_cron(name, "0 3 * * *", "report.build", [1],
                                       options={"queue": "reports"})  # fmt: skip
    return entry


def test_list_shows_schedule_next_run_and_queue(admin_client):
    _entry()
    html = admin_client.get(LIST).content.decode()
    assert "nightly" in html and "0 3 * * *" in html and "reports" in html and "active" in html


def test_add_validates_and_registers(admin_client):
    url = reverse("admin:ojs_cronjob_add")
    data = {"name": "digest", "expression": "61 * * * *", "timezone": "UTC", "type": "mail.digest",
            "args": "[]", "options": "{}", "overlap_policy": "skip", "enabled": "on",
            "description": ""}  # fmt: skip
    refused = admin_client.post(url, data)
    assert refused.status_code == 200 and not CronJob.objects.exists()
    assert "not a valid cron expression" in refused.content.decode()
    response = admin_client.post(url, {**data, "expression": "@daily"}, follow=True)
    assert response.status_code == 200
    entry = CronJob.objects.get(pk="digest")
    assert entry.next_run_at is not None and entry.origin == "api"
    assert AuditEntry.objects.filter(action="cron.register").exists()


def test_edit_reschedules_through_the_lifecycle(admin_client):
    _entry()
    url = reverse("admin:ojs_cronjob_change", args=["nightly"])
    data = {"expression": "@hourly", "timezone": "Europe/Paris", "type": "report.build",
            "args": "[2]", "options": '{"queue": "reports"}', "overlap_policy": "allow",
            "enabled": "on", "description": "edited"}  # fmt: skip
    admin_client.post(url, data, follow=True)
    entry = CronJob.objects.get()
    assert (entry.expression, entry.timezone, entry.args) == ("@hourly", "Europe/Paris", [2])
    assert entry.next_run_at <= timezone.now() + timedelta(hours=1)


def test_pause_resume_and_run_now_need_confirmation():
    _entry()
    client = operator("ojs.view_cronjob", "ojs.change_cronjob", "ojs.run_cron_now")
    page = ask(client, LIST, "pause_cron", ["nightly"])
    assert page.status_code == 200 and "Yes, pause 1 cron job" in page.content.decode()
    assert CronJob.objects.get().enabled
    messages = messages_of(confirm(client, LIST, "pause_cron", ["nightly"]))
    assert CronJob.objects.get().next_run_at is None and any("paused" in m for m in messages)
    confirm(client, LIST, "resume_cron", ["nightly"])
    assert CronJob.objects.get().enabled
    confirm(client, LIST, "run_cron_now", ["nightly"])
    job = Job.objects.get()
    assert job.meta["cron_name"] == "nightly"
    detail = client.get(reverse("admin:ojs_cronjob_change", args=["nightly"])).content.decode()
    assert str(job.id) in detail  # recent jobs


def test_run_now_needs_its_permission():
    _entry()
    client = operator("ojs.view_cronjob", "ojs.change_cronjob")
    confirm(client, LIST, "run_cron_now", ["nightly"])
    assert not Job.objects.exists()


def test_delete_goes_through_the_lifecycle(admin_client):
    _entry()
    url = reverse("admin:ojs_cronjob_delete", args=["nightly"])
    admin_client.post(url, {"post": "yes"}, follow=True)
    assert not CronJob.objects.exists()
    assert AuditEntry.objects.filter(action="cron.delete").exists()
