"""The dead letter admin: discarded jobs only, the error in the list, retry and purge."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs import lifecycle
from django_ojs.models import Event, Job
from tests.factories import JobFactory
from tests.integration.admin_support import confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_deadletterjob_changelist")


def listed(response) -> set:
    return {job.pk for job in response.context["cl"].result_list}


def test_dead_letter__lists_discarded_jobs_with_their_error(admin_client):
    dead = JobFactory(
        discarded=True,
        error={"type": "SMTPError", "code": "smtp", "message": "mailbox unavailable", "attempt": 3},
    )
    JobFactory(completed=True)
    JobFactory(retryable=True)

    response = admin_client.get(LIST)

    assert response.status_code == 200
    assert listed(response) == {dead.pk}
    html = response.content.decode()
    assert "SMTPError" in html and "mailbox unavailable" in html


def test_dead_letter__is_in_the_admin_index(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()

    assert LIST in html and "Dead letter" in html


def test_dead_letter__filters_by_error_type_and_queue(admin_client):
    smtp = JobFactory(discarded=True, queue="mail", error={"type": "SMTPError", "message": "x"})
    JobFactory(discarded=True, queue="mail", error={"type": "Timeout", "message": "y"})
    JobFactory(discarded=True, queue="reports", error={"type": "SMTPError", "message": "z"})

    response = admin_client.get(LIST, {"error_type": "SMTPError", "queue": "mail"})

    assert listed(response) == {smtp.pk}
    choices = [c["display"] for spec in response.context["cl"].filter_specs
               if spec.title == "error type" for c in spec.choices(response.context["cl"])]  # fmt: skip
    assert {"SMTPError", "Timeout"} <= set(choices)


def test_dead_letter__detail_page(admin_client):
    dead = JobFactory(discarded=True, args=["a@example.com"])

    response = admin_client.get(reverse("admin:ojs_deadletterjob_change", args=[dead.pk]))

    assert response.status_code == 200
    assert {name for name, _, _ in response.context["ojs_actions"]} == {
        "retry_jobs",
        "purge_dead_letter",
    }
    assert "a@example.com" in response.content.decode()


def test_dead_letter__retry(admin_client):
    dead = [JobFactory(discarded=True) for _ in range(2)]

    response = confirm(admin_client, LIST, "retry_jobs", [j.pk for j in dead])

    assert messages_of(response) == ["2 retried"]
    for job in dead:
        job.refresh_from_db()
        assert (job.state, job.attempt) == ("available", 0)
    assert Event.objects.filter(type="dead_letter.retried").count() == 2


def test_dead_letter__purge(admin_client):
    dead = JobFactory(discarded=True)

    response = confirm(admin_client, LIST, "purge_dead_letter", [dead.pk])

    assert messages_of(response) == ["1 purged"]
    assert not Job.objects.filter(pk=dead.pk).exists()


def test_dead_letter__job_retried_meanwhile_is_skipped_not_purged(admin_client):
    dead = JobFactory(discarded=True)
    lifecycle.retry_discarded(dead.pk)  # another operator was faster

    response = confirm(admin_client, LIST, "purge_dead_letter", [dead.pk])

    assert messages_of(response) == [f"0 purged; 1 skipped: no longer in this list ({dead.pk})"]
    assert Job.objects.get(pk=dead.pk).state == "available"


def test_dead_letter__purge_refused_by_the_core_for_a_live_job(admin_client, rf):
    from django_ojs.admin.jobs import ACTIONS

    job = JobFactory(active=True)

    assert ACTIONS["purge_dead_letter"].run(rf.get("/"), job.pk) == "currently active"
    assert Job.objects.filter(pk=job.pk).exists()


def test_dead_letter__viewer_of_jobs_can_see_it_but_not_act():
    client = operator("ojs.view_job")
    dead = JobFactory(discarded=True)

    response = client.get(LIST)

    assert response.status_code == 200 and listed(response) == {dead.pk}
    assert response.context["action_form"] is None


def test_dead_letter__retry_allowed_but_not_purge():
    client = operator("ojs.view_job", "ojs.retry_job")
    dead = JobFactory(discarded=True)

    choices = {n for n, _ in client.get(LIST).context["action_form"].fields["action"].choices}
    assert "retry_jobs" in choices and "purge_dead_letter" not in choices

    assert messages_of(confirm(client, LIST, "purge_dead_letter", [dead.pk])) == [
        "No action selected."
    ]
    assert Job.objects.get(pk=dead.pk).state == "discarded"


def test_dead_letter__purge_permission():
    client = operator("ojs.view_job", "ojs.purge_job")
    dead = JobFactory(discarded=True)

    assert messages_of(confirm(client, LIST, "purge_dead_letter", [dead.pk])) == ["1 purged"]


def test_dead_letter__hidden_without_any_job_permission():
    client = operator(username="nobody")

    assert client.get(LIST).status_code == 403
