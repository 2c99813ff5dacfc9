"""The queues admin: counts by state per queue, the paused flag, a queue's own retention,
pause and resume."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs import lifecycle, queues
from django_ojs.models import Event, Queue
from tests.factories import JobFactory, QueueFactory
from tests.integration.admin_support import ask, confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_queue_changelist")


def rows_by_name(response) -> dict:
    return {row["name"]: row for row in response.context["rows"]}


def test_list__counts_jobs_by_state_per_queue(admin_client):
    QueueFactory(name="mail")
    JobFactory(queue="mail")
    JobFactory(queue="mail", discarded=True)
    JobFactory(queue="reports", completed=True)  # a queue known only from its jobs

    response = admin_client.get(LIST)

    assert response.status_code == 200
    rows = rows_by_name(response)
    assert set(rows) == {"default", "mail", "reports"}
    states = response.context["states"]
    mail = dict(zip(states, (count for count, _ in rows["mail"]["counts"]), strict=True))
    assert mail["available"] == 1 and mail["discarded"] == 1 and mail["active"] == 0
    assert rows["mail"]["total"] == 2 and rows["reports"]["total"] == 1
    html = response.content.decode()
    assert "queue=mail&amp;state__exact=discarded" in html


def test_list__shows_the_paused_flag(admin_client):
    queues.pause("mail")

    response = admin_client.get(LIST)

    assert rows_by_name(response)["mail"]["paused"] is True
    assert '<span class="ojs-flag-paused"' in response.content.decode()


def test_list__shows_a_queue_own_retention(admin_client):
    lifecycle.set_queue_retention("mail", {"completed": "P1D", "discarded": "PT36H"})
    JobFactory(queue="reports")

    response = admin_client.get(LIST)

    rows = rows_by_name(response)
    assert rows["mail"]["retention"] == "completed P1D, discarded P1DT12H"
    assert rows["reports"]["retention"] == ""  # follows OJS_RETENTION
    assert "<td>completed P1D, discarded P1DT12H</td>" in response.content.decode()


def test_pause__asks_then_pauses(admin_client):
    JobFactory(queue="mail")

    page = ask(admin_client, LIST, "pause_queues", ["mail"])
    assert "Yes, pause 1 queue" in page.content.decode()
    assert not Queue.objects.filter(name="mail", paused=True).exists()

    response = confirm(admin_client, LIST, "pause_queues", ["mail"])

    assert messages_of(response) == ["1 paused"]
    assert Queue.objects.get(name="mail").paused
    assert Event.objects.get(type="queue.paused").data["paused_by"] == "admin:admin"


def test_pause__reports_queues_already_paused(admin_client):
    queues.pause("mail")

    response = confirm(admin_client, LIST, "pause_queues", ["mail", "default"])

    assert messages_of(response) == ["1 paused; 1 skipped: already paused (mail)"]
    assert Queue.objects.get(name="default").paused


def test_resume(admin_client):
    queues.pause("mail")

    response = confirm(admin_client, LIST, "resume_queues", ["mail", "default"])

    assert messages_of(response) == ["1 resumed; 1 skipped: not paused (default)"]
    assert not Queue.objects.get(name="mail").paused


def test_pause__without_a_selection(admin_client):
    response = admin_client.post(LIST, {"action": "pause_queues", "index": "0"}, follow=True)

    assert "Items must be selected" in messages_of(response)[0]
    assert not Queue.objects.filter(paused=True).exists()


def test_pause__invalid_queue_name_is_skipped(admin_client):
    response = confirm(admin_client, LIST, "pause_queues", ["bad name!"])

    (message,) = messages_of(response)
    assert message.startswith("0 paused; 1 skipped: ")
    assert not Queue.objects.filter(name="bad name!").exists()


def test_permissions__pausing_needs_pause_queue():
    viewer = operator("ojs.view_queue", username="viewer")
    pauser = operator("ojs.view_queue", "ojs.pause_queue", username="pauser")

    response = viewer.get(LIST)
    assert response.status_code == 200 and response.context["actions"] == []
    assert confirm(viewer, LIST, "pause_queues", ["mail"]).status_code == 403
    assert not Queue.objects.filter(paused=True).exists()

    assert messages_of(confirm(pauser, LIST, "pause_queues", ["mail"])) == ["1 paused"]


def test_permissions__queues_hidden_without_view_permission():
    assert operator(username="nobody").get(LIST).status_code == 403
