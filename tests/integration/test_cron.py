"""Cron jobs (OJS cron extension): registration, firing exactly once per slot, HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.exceptions import CronNotFound, ValidationError
from django_ojs.models import CronJob, Event, Job
from tests.integration.api_support import assert_ojs_error, client
from tests.threads import run_threads

pytestmark = pytest.mark.django_db


def _register(name="nightly", expression="0 3 * * *", **kwargs):
    kwargs.setdefault("options", {"queue": "reports"})
    entry, _ = lifecycle.register_cron(name, expression, "report.build", [1], **kwargs)
    return entry


def _make_due(name, ago=timedelta(seconds=1)):
    slot = (timezone.now() - ago).replace(microsecond=0)
    CronJob.objects.filter(pk=name).update(next_run_at=slot)
    return slot


def test_register_computes_the_next_run_and_upserts():
    entry = _register(timezone_name="Europe/Paris")
    assert entry.enabled and entry.next_run_at > timezone.now()
    again, created = lifecycle.register_cron("nightly", "@hourly", "report.build", [2])
    assert not created and again.args == [2] and again.expression == "@hourly"
    assert CronJob.objects.count() == 1


def test_a_due_slot_fires_one_job_with_its_cron_metadata():
    _register()
    slot = _make_due("nightly")
    assert lifecycle.fire_due_cron() == (1, 0)
    job = Job.objects.get()
    assert (job.type, job.args, job.queue) == ("report.build", [1], "reports")
    assert job.meta["cron_name"] == "nightly"
    assert job.meta["cron_scheduled_at"].startswith(slot.strftime("%Y-%m-%dT%H:%M:%S"))
    entry = CronJob.objects.get()
    assert entry.next_run_at > timezone.now() and entry.run_count == 1
    assert entry.last_job_id == job.id
    assert Event.objects.filter(type="cron.triggered", subject="nightly").count() == 1
    assert lifecycle.fire_due_cron() == (0, 0)  # the slot is gone


def test_catch_up_fires_at_most_one_late_run():
    _register(expression="@every 1m")
    _make_due("nightly", ago=timedelta(hours=3))  # 180 slots were missed
    assert lifecycle.fire_due_cron() == (1, 0)
    assert lifecycle.fire_due_cron() == (0, 0)
    missed = Event.objects.get(type="cron.triggered").data["missed"]
    assert 178 <= missed <= 180  # the slots between the late run and the next one
    entry = CronJob.objects.get()
    assert timezone.now() < entry.next_run_at <= timezone.now() + timedelta(minutes=1)


def test_skip_overlap_skips_while_the_previous_run_is_active():
    _register()
    _make_due("nightly")
    lifecycle.fire_due_cron()
    (job,) = lifecycle.fetch(["reports"], worker_id="w-1")
    _make_due("nightly")
    assert lifecycle.fire_due_cron() == (0, 1)
    assert Job.objects.count() == 1
    skipped = Event.objects.get(type="cron.skipped")
    assert skipped.data["reason"] == "overlap" and skipped.data["active_job_id"] == str(job.id)
    lifecycle.ack(job.id, worker_id="w-1")
    _make_due("nightly")
    assert lifecycle.fire_due_cron() == (1, 0)


def test_cancel_previous_and_allow():
    _register(overlap_policy="cancel_previous")
    _make_due("nightly")
    lifecycle.fire_due_cron()
    (first,) = lifecycle.fetch(["reports"], worker_id="w-1")
    _make_due("nightly")
    assert lifecycle.fire_due_cron() == (1, 0)
    assert Job.objects.get(pk=first.id).state == "cancelled"
    _register("often", overlap_policy="allow")
    _make_due("often")
    lifecycle.fire_due_cron()
    lifecycle.fetch(["reports"], worker_id="w-2", count=5)
    _make_due("often")
    assert lifecycle.fire_due_cron() == (1, 0)


def test_disabled_entries_do_not_fire_and_have_no_next_run():
    _register()
    entry = lifecycle.set_cron_enabled("nightly", False)
    assert entry.next_run_at is None
    assert lifecycle.fire_due_cron() == (0, 0)
    assert lifecycle.set_cron_enabled("nightly", True).next_run_at > timezone.now()


def test_run_now_enqueues_without_moving_the_schedule():
    before = _register().next_run_at
    job = lifecycle.run_cron_now("nightly")
    assert job.meta["cron_manual"] is True
    assert CronJob.objects.get().next_run_at == before


def test_invalid_registrations_are_refused():
    with pytest.raises(ValidationError) as info:
        _register(expression="61 * * * *")
    assert info.value.field == "expression"
    with pytest.raises(ValidationError):
        _register(name="Bad Name")
    with pytest.raises(ValidationError):
        _register(overlap_policy="sometimes")
    with pytest.raises(ValidationError):
        lifecycle.register_cron("x", "@daily", "Not A Type!", [])
    with pytest.raises(CronNotFound):
        lifecycle.delete_cron("missing")


@override_settings(
    OJS_CRON={"digest": {"cron": "0 8 * * MON", "type": "mail.digest", "queue": "mail"}}
)
def test_sync_stores_declarations_and_keeps_an_operators_pause():
    assert lifecycle.sync_cron() == {"created": 1, "updated": 0, "removed": 0}
    entry = CronJob.objects.get(pk="digest")
    assert entry.origin == "settings" and entry.options == {"queue": "mail"}
    lifecycle.set_cron_enabled("digest", False)
    lifecycle.sync_cron()
    assert CronJob.objects.get(pk="digest").enabled is False
    _register("from-api")
    with override_settings(OJS_CRON={}):
        assert lifecycle.sync_cron()["removed"] == 1
    assert list(CronJob.objects.values_list("name", flat=True)) == ["from-api"]


def test_periodic_decorator_declares_an_entry():
    from django_ojs.registry import _periodic, registry

    @django_ojs.periodic("@every 30s", queue="ticks")
    @django_ojs.handler("tick.tock")
    def tock():
        return None

    try:
        lifecycle.sync_cron()
        entry = CronJob.objects.get(pk="tick.tock")
        assert entry.origin == "code" and entry.type == "tick.tock"
        assert entry.options == {"queue": "ticks"}
    finally:
        _periodic.pop("tick.tock", None)
        registry.unregister("tick.tock")


def test_reaper_pass_fires_due_cron():
    _register()
    _make_due("nightly")
    result = reaper.run_once()
    assert result.cron_fired == 1 and Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_evaluators_fire_each_slot_exactly_once():
    evaluators = 8 if connection.vendor == "postgresql" else 3
    _register()
    slots = 5
    for _ in range(slots):
        _make_due("nightly")
        run_threads(evaluators, lambda _: lifecycle.fire_due_cron())
        # the previous run must not be active, or the next slot is skipped (overlap)
        assert Job.objects.filter(state="available").count() == 1
        Job.objects.update(state="completed")
    assert Job.objects.count() == slots
    assert CronJob.objects.get().run_count == slots


# ------------------------------------------------------------------------------ HTTP


def test_http_register_list_get_toggle_delete_in_both_shapes():
    api = client("admin")
    suite_shape = {"name": "alpha", "expression": "0 * * * *", "timezone": "Asia/Tokyo",
                   "job_template": {"type": "a.b", "args": [1], "options": {"queue": "q"}}}  # fmt: skip
    created = api.post("/cron", suite_shape)
    assert created.status_code == 201, created.body
    assert created.body["cron"]["timezone"] == "Asia/Tokyo"
    assert created.body["cron_job"]["next_run_at"] and created.body["cron"]["enabled"] is True
    spec_shape = {"name": "beta", "cron": "@daily", "type": "a.c", "args": [],
                  "overlap_policy": "allow", "description": "daily"}  # fmt: skip
    assert api.post("/cron", spec_shape).status_code == 201
    assert api.post("/cron", spec_shape).status_code == 200  # upsert
    listed = api.get("/cron").body
    assert (
        [c["name"] for c in listed["crons"]]
        == ["alpha", "beta"]
        == [c["name"] for c in listed["cron_jobs"]]
    )
    assert api.get("/cron/beta").body["cron"]["overlap_policy"] == "allow"
    paused = api.request("PATCH", "/cron/beta", {"enabled": False})
    assert paused.status_code == 200 and paused.body["cron"]["next_run_at"] is None
    deleted = api.delete("/cron/beta")
    assert deleted.body == {"deleted": True, "name": "beta", "cron": {"name": "beta"}}
    assert_ojs_error(api.delete("/cron/beta"), 404, "not_found")
    assert_ojs_error(api.get("/cron/nope"), 404, "not_found")


@pytest.mark.parametrize(
    "body",
    [
        {
            "name": "x",
            "expression": "not a valid cron",
            "job_template": {"type": "a.b", "args": []},
        },
        {"name": "x", "expression": "99 25 32 13 8", "job_template": {"type": "a.b", "args": []}},
        {"name": "x", "cron": "@daily", "type": "a.b", "timezone": "Nowhere/Else"},
        {"name": "X!", "cron": "@daily", "type": "a.b"},
        {"cron": "@daily", "type": "a.b"},
        {"name": "x", "cron": "@daily"},
        {"name": "x", "cron": "@daily", "type": "a.b", "job_template": []},
        {"name": "x", "cron": "@daily", "type": "a.b", "overlap_policy": 3},
    ],
)
def test_http_bad_registrations_are_4xx(body):
    response = client("admin").post("/cron", body)
    assert 400 <= response.status_code < 500, response.body
    assert response.body["error"]["message"]


def test_http_registering_needs_the_admin_scope():
    body = {"name": "x", "cron": "@daily", "type": "a.b"}
    assert_ojs_error(client("producer").post("/cron", body), 403, "permission_denied")
    assert client("operator").get("/cron").status_code == 200


def test_enqueue_overlap_queues_runs_but_never_runs_two_at_once(caplog):
    _register(overlap_policy="enqueue")
    for _ in range(4):
        _make_due("nightly")
        assert lifecycle.fire_due_cron() == (1, 0)
    assert Job.objects.count() == 4
    (running,) = lifecycle.fetch(["reports"], 10, worker_id="w-1")
    assert lifecycle.fetch(["reports"], 10, worker_id="w-2") == []  # the others wait
    lifecycle.ack(running.id, worker_id="w-1")
    assert len(lifecycle.fetch(["reports"], 10, worker_id="w-2")) == 1
    assert "runs are queued behind a running one" in caplog.text


def test_enqueue_overlap_refuses_a_template_rate_limit():
    with pytest.raises(ValidationError) as info:
        _register(overlap_policy="enqueue", options={"rate_limit": {"concurrency": 2}})
    assert info.value.field == "overlap_policy"
