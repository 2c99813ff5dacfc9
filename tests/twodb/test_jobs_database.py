"""A project whose jobs live in a database of their own, in one process.

``default`` holds Django's auth, sessions and admin log; ``jobs`` (``OJS_DATABASE``) holds
every django-ojs table, routed by ``django_ojs.routers.OJSRouter``
(``tests/twodb_settings.py``). What docs/how-to/run-at-scale.md says of that setup.
"""

from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.contrib.auth.models import Permission, User
from django.core.checks import WARNING, run_checks
from django.core.management import call_command
from django.db import connections, router, transaction
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_ojs
from django_ojs import apikeys, lifecycle
from django_ojs.models import ApiKey, AuditEntry, CronJob, Event, Job, Workflow
from django_ojs.routers import OJSRouter
from tests.integration.admin_support import confirm, messages_of
from tests.integration.api_support import OJSClient
from tests.twodb.conftest import DATABASES

pytestmark = pytest.mark.django_db(databases=DATABASES)

LIST = reverse("admin:ojs_job_changelist")


def tables(alias: str) -> set[str]:
    return set(connections[alias].introspection.table_names())


def ojs_tables(alias: str) -> set[str]:
    return {name for name in tables(alias) if name.startswith("ojs_")}


def count(model: type, alias: str) -> int:
    return int(model.objects.using(alias).count())


def test_the_job_tables_exist_in_the_jobs_database_only():
    assert {"ojs_job", "ojs_event", "ojs_worker", "ojs_apikey", "ojs_cron"} <= ojs_tables("jobs")
    assert ojs_tables("default") == set()
    # And Django's own tables stay in default.
    assert {"auth_user", "django_session", "django_admin_log"} <= tables("default")
    assert not {"auth_user", "django_session", "django_admin_log"} & tables("jobs")


def test_migrate_runs_the_job_migrations_on_the_jobs_database_only():
    out = StringIO()
    call_command("migrate", database="jobs", stdout=out, verbosity=1)
    assert "No migrations to apply" in out.getvalue()
    call_command("migrate", stdout=StringIO(), verbosity=0)  # default: creates no job table
    assert ojs_tables("default") == set()
    # The admin's permissions on django-ojs's models are where the users are.
    assert (
        Permission.objects.using("default")
        .filter(content_type__app_label="ojs", codename="retry_job")
        .exists()
    )
    recorder = connections["jobs"].cursor()
    recorder.execute("SELECT COUNT(*) FROM django_migrations WHERE app = 'ojs'")
    assert recorder.fetchone()[0] >= 1


def test_the_router_sends_the_ojs_app_to_the_jobs_database_and_nothing_else():
    assert router.db_for_read(Job) == router.db_for_write(Job) == "jobs"
    assert router.db_for_write(User) == "default"
    assert router.allow_migrate_model("jobs", Job)
    assert not router.allow_migrate_model("default", Job)
    assert router.allow_migrate_model("default", User)
    assert not router.allow_migrate_model("jobs", User)
    ours = OJSRouter()
    assert ours.allow_migrate("jobs", "auth") is False
    assert ours.allow_migrate("default", "auth") is None  # no opinion: your other routers decide
    with override_settings(OJS_DATABASE="default"):
        # One database for everything: the router changes nothing.
        assert ours.allow_migrate("default", "auth") is None
        assert ours.allow_migrate("default", "ojs") is True
        assert ours.db_for_write(Job) == "default"


def test_the_system_checks_pass_with_the_router_and_say_what_is_missing_without_it():
    assert [m.id for m in run_checks(tags=["ojs"]) if m.id.startswith("ojs.")] == []
    with override_settings(DATABASE_ROUTERS=[]):
        (message,) = [m for m in run_checks(tags=["ojs"]) if m.id == "ojs.E016"]
        assert "send writes of django-ojs's models to 'default'" in message.msg
        assert "django_ojs.routers.OJSRouter" in message.hint
    with override_settings(DATABASE_ROUTERS=["tests.twodb.routers.ReadsElsewhere"]):
        (message,) = [m for m in run_checks(tags=["ojs"]) if m.id.startswith("ojs.")]
        assert (message.id, message.level) == ("ojs.W009", WARNING)
    with override_settings(DATABASE_ROUTERS=["tests.twodb.routers.ReadsOnly"]):
        ids = {m.id for m in run_checks(tags=["ojs"])}
        assert "ojs.E017" in ids
    with override_settings(DATABASE_ROUTERS=["tests.twodb.routers.Everywhere"]):
        (message,) = [m for m in run_checks(tags=["ojs"]) if m.id == "ojs.W008"]
        assert "'default'" in message.msg


def test_enqueue_commits_with_the_jobs_database_not_with_default():
    # A rolled-back transaction on default does not take the job with it ...
    with pytest.raises(RuntimeError), transaction.atomic():
        User.objects.create_user("alice")
        kept = django_ojs.enqueue("email.send", ["alice@example.com"])
        raise RuntimeError("roll back default")
    assert not User.objects.filter(username="alice").exists()
    assert Job.objects.filter(pk=kept.pk).exists()
    # ... one on the jobs database does.
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs"):
        gone = django_ojs.enqueue("email.send", ["bob@example.com"])
        raise RuntimeError("roll back jobs")
    assert not Job.objects.filter(pk=gone.pk).exists()
    assert count(Job, "jobs") == 1


def test_the_http_api_keeps_its_keys_and_jobs_in_the_jobs_database():
    _, raw = apikeys.create("producer", "admin")
    assert count(ApiKey, "jobs") == 1
    api = OJSClient(raw)
    with CaptureQueriesContext(connections["default"]) as on_default:
        created = api.enqueue("email.send", ["carol@example.com"])
    assert on_default.captured_queries == []  # an API request needs no default database
    assert Job.objects.using("jobs").filter(pk=created["id"]).exists()
    (claimed,) = api.fetch()
    response = api.post("/workers/ack", {"job_id": claimed["id"], "result": {"sent": True}})
    assert response.status_code == 200, response.body
    assert Job.objects.get(pk=created["id"]).state == "completed"
    assert api.get("/ready").status_code == 200
    # A key revoked through the jobs database stops working.
    apikeys.revoke(ApiKey.objects.get().prefix)
    assert OJSClient(raw).get(f"/jobs/{created['id']}").status_code == 401


def test_the_admin_lists_and_acts_on_the_jobs_database_with_users_in_default():
    user = User.objects.create_superuser("ops", password="pw")
    admin = Client()
    admin.force_login(user)
    dead = django_ojs.enqueue("email.send", ["dave@example.com"], retry={"max_attempts": 1})
    (claimed,) = lifecycle.fetch(["default"], worker_id="w1")
    lifecycle.fail(claimed.pk, {"message": "smtp down"}, worker_id="w1")
    assert Job.objects.get(pk=dead.pk).state == "discarded"
    waiting = django_ojs.enqueue("email.send", ["erin@example.com"])

    page = admin.get(LIST)
    assert page.status_code == 200
    assert str(dead.pk) in page.content.decode() and str(waiting.pk) in page.content.decode()
    assert admin.get(reverse("admin:ojs_job_change", args=[dead.pk])).status_code == 200
    assert admin.get(reverse("admin:ojs_dashboard_changelist")).status_code == 200

    response = confirm(admin, LIST, "retry_jobs", [dead.pk])
    assert messages_of(response) == ["1 retried"]
    assert Job.objects.get(pk=dead.pk).state == "available"
    response = confirm(admin, LIST, "cancel_jobs", [waiting.pk])
    assert messages_of(response) == ["1 cancelled"]
    assert Job.objects.get(pk=waiting.pk).state == "cancelled"
    # The audit trail is django-ojs's table (jobs); the user who acted is in default.
    assert AuditEntry.objects.using("jobs").filter(actor__contains="ops").count() == 2


def test_cron_and_workflows_write_to_the_jobs_database():
    lifecycle.register_cron("nightly", "@every 1s", "email.send", ["ops@example.com"])
    assert count(CronJob, "jobs") == 1
    fired, _ = lifecycle.fire_due_cron(now=CronJob.objects.get().next_run_at)
    assert fired == 1
    assert Job.objects.filter(meta__cron_name="nightly").count() == 1

    flow = django_ojs.chain(
        django_ojs.job("email.send", ["a"], queue="flows"),
        django_ojs.job("email.send", ["b"], queue="flows"),
    )
    assert Workflow.objects.using("jobs").filter(pk=flow.pk).exists()
    (step,) = lifecycle.fetch(["flows"], worker_id="w1")
    lifecycle.ack(step.pk, {"ok": 1}, worker_id="w1")
    assert Job.objects.filter(workflow=flow).count() == 2  # the next step, enqueued on ack
    assert count(Event, "jobs") > 0


@pytest.mark.django_db(databases=DATABASES, transaction=True)
def test_wait_returns_when_another_thread_finishes_the_job():
    job = django_ojs.enqueue("email.send", ["frank@example.com"])
    claimed = threading.Event()

    def finish() -> None:
        try:
            (mine,) = lifecycle.fetch(["default"], worker_id="w2")
            claimed.set()
            lifecycle.ack(mine.pk, {"sent": 1}, worker_id="w2")
        finally:
            connections.close_all()

    thread = threading.Thread(target=finish)
    thread.start()
    done = django_ojs.wait(job.pk, timeout=60)
    thread.join(30)
    assert claimed.is_set()
    assert (done.state, done.result) == ("completed", {"sent": 1})


def test_the_django_task_backend_and_the_key_command_use_the_jobs_database():
    from tests.taskapp import tasks

    with pytest.raises(RuntimeError), transaction.atomic(using="jobs"):
        tasks.add.enqueue(1)
        raise RuntimeError("roll back jobs")
    assert count(Job, "jobs") == 0
    result = tasks.add.enqueue(1, 2)
    assert Job.objects.using("jobs").filter(pk=result.id).exists()

    out = StringIO()
    call_command("ojs_apikey", "create", "billing", "--scope", "producer", stdout=out)
    assert ApiKey.objects.using("jobs").filter(name="billing").exists()
