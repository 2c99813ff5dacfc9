"""The audit trail (OJS security §11): operator/admin actions over HTTP and from the admin.

Each entry is written by the lifecycle in the action's transaction: a refused action
leaves none. The admin lists entries read-only, filtered by actor, action and date.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs import lifecycle
from django_ojs.actors import Actor
from django_ojs.exceptions import InvalidTransition
from django_ojs.models import AuditEntry, Job
from tests.factories import JobFactory, WorkerFactory
from tests.integration.admin_support import confirm
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:ojs_job_changelist")
DEAD = reverse("admin:ojs_deadletterjob_changelist")
QUEUES = reverse("admin:ojs_queue_changelist")
WORKERS = reverse("admin:ojs_worker_changelist")
AUDIT = reverse("admin:ojs_auditentry_changelist")


def entries() -> list[tuple[str, str, str]]:
    return list(AuditEntry.objects.order_by("id").values_list("action", "source", "actor"))


# --------------------------------------------------------------------------- HTTP


def test_http__cancel_is_recorded_with_the_key_and_the_request_id():
    job = JobFactory(queue="orders")
    api = client("operator")
    response = api.delete(f"/jobs/{job.id}")
    assert response.status_code == 200

    entry = AuditEntry.objects.get()
    assert (entry.action, entry.source, entry.queue) == ("job.cancel", "http", "orders")
    assert entry.actor.startswith("apikey:test-operator (ojs_") and entry.actor.endswith("_…)")
    assert entry.job_ids == [str(job.id)]
    assert entry.request_id == response["X-Request-Id"]
    assert entry.detail["previous_state"] == "available"
    # The event names the same principal.
    assert entry.actor == api_event_actor(job)


def api_event_actor(job: Job) -> str:
    from django_ojs.models import Event

    return Event.objects.get(type="job.cancelled", job_id=job.id).data["cancelled_by"]


def test_http__dead_letter_and_queue_actions_are_recorded():
    api = client("admin")
    retried = JobFactory(state="discarded")
    deleted = JobFactory(state="discarded")
    assert api.post(f"/dead-letter/{retried.id}/retry").status_code == 200
    assert api.delete(f"/dead-letter/{deleted.id}").status_code == 200
    assert api.post("/queues/mail/pause").status_code == 200
    assert api.post("/queues/mail/resume").status_code == 200

    assert [(a, s) for a, s, _ in entries()] == [
        ("dead_letter.retry", "http"),
        ("dead_letter.delete", "http"),
        ("queue.pause", "http"),
        ("queue.resume", "http"),
    ]
    assert AuditEntry.objects.get(action="dead_letter.delete").job_ids == [str(deleted.id)]
    assert AuditEntry.objects.get(action="queue.pause").queue == "mail"


def test_http__a_refused_action_leaves_no_entry():
    done = JobFactory(state="completed")
    assert_ojs_error(client("operator").delete(f"/jobs/{done.id}"), 409, "conflict")
    assert not AuditEntry.objects.exists()


def test_reads_and_worker_calls_are_not_audited():
    api = client("admin")
    job = api.enqueue("a.b")
    api.get(f"/jobs/{job['id']}")
    api.fetch(worker_id="w1")
    api.post("/workers/ack", {"job_id": job["id"], "worker_id": "w1"})
    assert not AuditEntry.objects.exists()


# --------------------------------------------------------------------------- admin


def test_admin__job_actions_are_recorded(admin_client):
    cancel = JobFactory()
    discard = JobFactory()
    run_now = JobFactory(scheduled=True)
    purge = JobFactory(state="completed")
    confirm(admin_client, JOBS, "cancel_jobs", [cancel.pk])
    confirm(admin_client, JOBS, "discard_jobs", [discard.pk])
    confirm(admin_client, JOBS, "run_jobs_now", [run_now.pk])
    confirm(admin_client, JOBS, "purge_jobs", [purge.pk])
    confirm(admin_client, DEAD, "retry_jobs", [discard.pk])
    dead = JobFactory(state="discarded")
    confirm(admin_client, DEAD, "purge_dead_letter", [dead.pk])

    assert entries() == [
        ("job.cancel", "admin", "admin:admin"),
        ("job.discard", "admin", "admin:admin"),
        ("job.run_now", "admin", "admin:admin"),
        ("job.purge", "admin", "admin:admin"),
        ("dead_letter.retry", "admin", "admin:admin"),
        ("dead_letter.delete", "admin", "admin:admin"),
    ]
    assert AuditEntry.objects.get(action="job.purge").job_ids == [str(purge.pk)]


def test_admin__queue_and_worker_actions_are_recorded(admin_client):
    WorkerFactory(id="w-1")
    confirm(admin_client, QUEUES, "pause_queues", ["mail"])
    confirm(admin_client, QUEUES, "resume_queues", ["mail"])
    confirm(admin_client, WORKERS, "quiet_workers", ["w-1"])
    confirm(admin_client, WORKERS, "terminate_workers", ["w-1"])
    confirm(admin_client, WORKERS, "resume_workers", ["w-1"])

    assert [a for a, _, _ in entries()] == [
        "queue.pause",
        "queue.resume",
        "worker.quiet",
        "worker.terminate",
        "worker.running",
    ]
    assert set(AuditEntry.objects.values_list("worker_id", flat=True)) == {"", "w-1"}


def test_admin__the_trail_is_listed_read_only_with_filters(admin_client):
    job = JobFactory()
    confirm(admin_client, JOBS, "cancel_jobs", [job.pk])
    client("admin").post("/queues/mail/pause")

    html = admin_client.get(AUDIT).content.decode()
    assert "job.cancel" in html and "queue.pause" in html and "admin:admin" in html

    filtered = admin_client.get(AUDIT, {"action": "queue.pause"})
    assert list(filtered.context["cl"].queryset.values_list("action", flat=True)) == ["queue.pause"]
    by_actor = admin_client.get(AUDIT, {"actor": "admin:admin"})
    assert [e.action for e in by_actor.context["cl"].queryset] == ["job.cancel"]
    assert admin_client.get(AUDIT, {"time__gte": "2000-01-01 00:00:00+00:00"}).status_code == 200

    entry = AuditEntry.objects.first()
    assert admin_client.get(reverse("admin:ojs_auditentry_add")).status_code == 403
    change = reverse("admin:ojs_auditentry_change", args=[entry.pk])
    assert admin_client.get(change).status_code == 200
    assert admin_client.post(change, {"actor": "someone else"}).status_code == 403
    delete = reverse("admin:ojs_auditentry_delete", args=[entry.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403


# --------------------------------------------------------------------------- Python


def test_python__an_actor_is_audited_in_the_same_transaction():
    job = JobFactory(state="completed")
    actor = Actor("svc:billing", source="python")
    with pytest.raises(InvalidTransition):
        lifecycle.cancel(job.id, actor=actor)
    assert not AuditEntry.objects.exists()
    lifecycle.cancel(JobFactory().id, actor=actor)
    lifecycle.cancel(JobFactory().id)  # no actor: no entry
    assert entries() == [("job.cancel", "python", "svc:billing")]


def test_denials_and_auth_failures__are_logged_as_structured_json(caplog):
    import json

    from tests.integration.api_support import OJSClient

    with caplog.at_level("WARNING", logger="django_ojs.audit"):
        client("producer").get("/queues")
        bad = OJSClient("ojs_000000000000_secret-that-must-not-be-logged")
        bad.get("/queues")
    lines = [json.loads(r.message) for r in caplog.records if r.name == "django_ojs.audit"]
    assert [line["event_type"] for line in lines] == [
        "authz.permission_denied",
        "auth.login_failure",
    ]
    assert lines[0]["principal"].startswith("apikey:test-producer (ojs_")
    assert lines[0]["detail"]["operation"] == "inspect"
    assert lines[0]["outcome"] == "failure" and lines[0]["correlation_id"]
    assert "secret-that-must-not-be-logged" not in caplog.text
