"""The workers admin: heartbeat staleness, active jobs, and quiet / terminate directives."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.models import Worker
from tests.factories import JobFactory, WorkerFactory
from tests.integration.admin_support import ask, confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_worker_changelist")


def listed(response) -> set:
    return {w.pk for w in response.context["cl"].result_list}


def test_list__shows_worker_columns_and_active_jobs(admin_client):
    worker = WorkerFactory(
        id="w-1", hostname="box-1", pid=4242, queues=["mail", "default"], concurrency=8
    )
    JobFactory(active=True, worker_id="w-1")
    JobFactory(active=True, worker_id="w-1")
    JobFactory(completed=True, worker_id="w-1")

    response = admin_client.get(LIST)

    html = response.content.decode()
    assert response.status_code == 200
    assert "box-1" in html and "4242" in html and "mail, default" in html
    row = next(w for w in response.context["cl"].result_list if w.pk == worker.pk)
    assert row.n_active == 2
    assert "worker_id=w-1&amp;state__exact=active" in html


def test_list__flags_stale_workers(admin_client, settings):
    settings.OJS_WORKER_STALE_AFTER = 60
    WorkerFactory(id="alive")
    WorkerFactory(id="silent", last_heartbeat_at=timezone.now() - timedelta(minutes=5))

    html = admin_client.get(LIST).content.decode()

    assert html.count("⚠ stale") == 1
    assert listed(admin_client.get(LIST, {"stale": "yes"})) == {"silent"}
    assert listed(admin_client.get(LIST, {"stale": "no"})) == {"alive"}


def test_list__filters_by_reported_state(admin_client):
    WorkerFactory(id="quiet-one", state="quiet")
    WorkerFactory(id="busy")

    assert listed(admin_client.get(LIST, {"state": "quiet"})) == {"quiet-one"}


def test_detail__lists_held_jobs_and_is_read_only(admin_client):
    WorkerFactory(id="w-9")
    job = JobFactory(active=True, worker_id="w-9", type="video.encode")
    url = reverse("admin:ojs_worker_change", args=["w-9"])

    response = admin_client.get(url)

    html = response.content.decode()
    assert reverse("admin:ojs_job_change", args=[job.pk]) in html and "video.encode" in html
    assert 'name="_save"' not in html
    assert admin_client.post(url, {"hostname": "x"}).status_code == 403
    assert admin_client.get(reverse("admin:ojs_worker_add")).status_code == 403


def test_quiet__is_delivered_in_the_next_heartbeat_reply(admin_client):
    WorkerFactory(id="w-1")

    page = ask(admin_client, LIST, "quiet_workers", ["w-1"])
    assert "Yes, quiet 1 worker" in page.content.decode()
    response = confirm(admin_client, LIST, "quiet_workers", ["w-1"])

    assert messages_of(response) == [
        "1 asked to go quiet (delivered in their next heartbeat reply)"
    ]
    assert Worker.objects.get(pk="w-1").directive == "quiet"
    reply = lifecycle.beat("w-1")
    assert (reply.state, reply.directive) == ("quiet", "quiet")
    html = admin_client.get(LIST).content.decode()
    assert "quiet <em>(pending)</em>" in html  # the worker has not reported quiet yet


def test_terminate_and_resume(admin_client):
    WorkerFactory(id="w-1")
    WorkerFactory(id="w-2")

    confirm(admin_client, LIST, "terminate_workers", ["w-1", "w-2"])
    assert set(Worker.objects.values_list("directive", flat=True)) == {"terminate"}
    assert lifecycle.beat("w-2").state == "terminate"

    response = confirm(admin_client, LIST, "resume_workers", ["w-1"])
    assert messages_of(response) == ["1 resumed"]
    assert Worker.objects.get(pk="w-1").directive == ""
    assert lifecycle.beat("w-1").state == "running"


def test_directive__for_a_worker_that_deregistered_is_skipped(admin_client):
    WorkerFactory(id="w-1")
    WorkerFactory(id="w-2")
    lifecycle.deregister("w-2")

    response = confirm(admin_client, LIST, "quiet_workers", ["w-1", "w-2"])

    assert messages_of(response) == [
        "1 asked to go quiet (delivered in their next heartbeat reply); "
        "1 skipped: no longer in this list (w-2)"
    ]


def test_permissions__directives_need_direct_worker():
    WorkerFactory(id="w-1")
    viewer = operator("ojs.view_worker", username="viewer")
    director = operator("ojs.view_worker", "ojs.direct_worker", username="director")

    response = viewer.get(LIST)
    assert response.status_code == 200 and response.context["action_form"] is None
    confirm(viewer, LIST, "quiet_workers", ["w-1"])
    assert Worker.objects.get(pk="w-1").directive == ""

    assert messages_of(confirm(director, LIST, "quiet_workers", ["w-1"]))[0].startswith("1 asked")
    assert Worker.objects.get(pk="w-1").directive == "quiet"
