"""The worker pools admin: list, add and edit through the lifecycle, delete, members."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_ojs import lifecycle
from django_ojs.models import AuditEntry, Event, WorkerPool
from tests.integration.admin_support import operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_workerpool_changelist")
ADD = reverse("admin:ojs_workerpool_add")


@pytest.fixture(autouse=True)
def fresh_schedulers():
    lifecycle.forget_pools()


def form(**changes):
    data = {"name": "general", "queues": "default, email", "strategy": "weighted",
            "weights": '{"default": 3}', "concurrency": "", "rotation_interval": "30",
            "min_dispatch_ratio": "0.05"}  # fmt: skip
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_list_shows_queues_strategy_weights_and_members(admin_client):
    lifecycle.save_pool("general", ["default", "email"], strategy="weighted",
                        weights={"default": 3, "email": 2})  # fmt: skip
    lifecycle.register("w1", pool="general")
    html = admin_client.get(LIST).content.decode()
    assert "general" in html and "default, email" in html and "3 : 2" in html
    assert "weighted" in html
    assert reverse("admin:ojs_worker_changelist") + "?pool=general" in html


def test_add_validates_and_saves_through_the_lifecycle(admin_client):
    refused = admin_client.post(ADD, form(weights='{"other": 2}'))
    assert refused.status_code == 200 and not WorkerPool.objects.exists()
    assert "not one of the queues" in refused.content.decode()
    refused = admin_client.post(ADD, form(queues="Bad Queue"))
    assert refused.status_code == 200 and not WorkerPool.objects.exists()
    response = admin_client.post(ADD, form(starvation_enabled="on", isolated="on"), follow=True)
    assert response.status_code == 200
    pool = WorkerPool.objects.get()
    assert pool.isolated is True
    assert (pool.queues, pool.strategy, pool.weights) == (
        ["default", "email"], "weighted", {"default": 3},
    )  # fmt: skip
    assert pool.starvation_enabled is True
    assert AuditEntry.objects.filter(action="pool.saved").exists()


def test_edit_changes_the_strategy_and_the_next_fetch_uses_it(admin_client):
    lifecycle.save_pool("general", ["default", "email"], strategy="weighted",
                        weights={"default": 3})  # fmt: skip
    url = reverse("admin:ojs_workerpool_change", args=["general"])
    page = admin_client.get(url).content.decode()
    assert 'value="default, email"' in page
    response = admin_client.post(url, form(name=None, strategy="strict", weights="{}"),
                                 follow=True)  # fmt: skip
    assert response.status_code == 200
    assert WorkerPool.objects.get().strategy == "strict"
    assert Event.objects.filter(type="scheduling.rebalanced").exists()
    # Both queues have jobs; strict takes the first.
    import django_ojs

    django_ojs.enqueue("t.x", queue="email")
    django_ojs.enqueue("t.x", queue="default")
    (job,) = lifecycle.PoolFetch("general")(1)
    assert job.queue == "default"


def test_delete_goes_through_the_lifecycle(admin_client):
    lifecycle.save_pool("general", ["default"])
    url = reverse("admin:ojs_workerpool_delete", args=["general"])
    admin_client.post(url, {"post": "yes"}, follow=True)
    assert not WorkerPool.objects.exists()
    assert AuditEntry.objects.filter(action="pool.deleted").exists()


def test_worker_list_filters_by_pool(admin_client):
    lifecycle.save_pool("general", ["default"])
    lifecycle.register("in-pool", pool="general")
    lifecycle.register("alone")
    url = reverse("admin:ojs_worker_changelist")
    html = admin_client.get(url + "?pool=general").content.decode()
    assert "in-pool" in html and "alone" not in html


def test_a_viewer_sees_pools_but_cannot_change_them():
    lifecycle.save_pool("general", ["default"])
    viewer = operator("ojs.view_workerpool")
    assert viewer.get(LIST).status_code == 200
    assert viewer.get(ADD).status_code == 403
    viewer.post(reverse("admin:ojs_workerpool_change", args=["general"]), form(name=None,
                strategy="strict"))  # fmt: skip
    assert WorkerPool.objects.get().strategy == "round-robin"
