"""The workflows admin: list with progress, the SVG graph, cancel and retry-failed-step."""

from __future__ import annotations

import pytest
from django.urls import reverse

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Job, Workflow
from tests.integration.admin_support import ask, confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_workflow_changelist")
job = django_ojs.job


def page(pk) -> str:
    return reverse("admin:ojs_workflow_change", args=[pk])


def fail_step(queue: str) -> Job:
    (claimed,) = lifecycle.fetch([queue], worker_id="w")
    return lifecycle.fail(
        claimed.id, {"message": "card declined", "retryable": False}, worker_id="w"
    )


def test_list_shows_state_and_progress(admin_client):
    wf = django_ojs.group(job("a.x", queue="a"), job("a.y", queue="a"), name="exports")
    (claimed,) = lifecycle.fetch(["a"], worker_id="w")
    lifecycle.ack(claimed.id, None, worker_id="w")
    html = admin_client.get(LIST).content.decode()
    assert "exports" in html and str(wf.pk) in html
    assert "1 / 2 done" in html and "running" in html


def test_page_draws_the_graph_with_each_node_linked_to_its_job(admin_client):
    wf = django_ojs.batch(
        job("b.x", queue="b"), job("b.y", queue="b"), on_complete=job("b.done", queue="cb")
    )
    html = admin_client.get(page(wf.pk)).content.decode()
    assert "<svg" in html and 'class="ojs-workflow-graph"' in html
    for member in Job.objects.filter(workflow=wf):
        assert reverse("admin:ojs_job_change", args=[member.pk]) in html
    assert html.count('data-state="available"') == 2
    assert html.count('data-state="pending"') == 1  # the callback waits
    assert html.count("<line") == 2  # each member feeds the callback
    chain = django_ojs.chain([job("c.s", [i], queue="c") for i in range(3)])
    html = admin_client.get(page(chain.pk)).content.decode()
    assert html.count("<line") == 2 and html.count('data-state="pending"') == 2


def test_nested_workflow_is_one_dashed_box_linked_to_its_own_page(admin_client):
    wf = django_ojs.chain(
        job("n.a", queue="n"),
        django_ojs.Group(job("n.b", queue="n"), job("n.c", queue="n"), name="fan"),
    )
    inner = Workflow.objects.get(parent=wf)
    html = admin_client.get(page(wf.pk)).content.decode()
    assert html.count("ojs-node-nested") == 1
    assert page(inner.pk) in html and "1. group fan" in html and "0/2 done" in html
    assert html.count("<line") == 1
    inner_html = admin_client.get(page(inner.pk)).content.decode()
    assert f"step 1 of {wf.pk}" in inner_html and page(wf.pk) in inner_html
    assert inner_html.count('data-state="pending"') == 2  # its jobs wait for step 0


def test_big_workflows_are_summarised(admin_client):
    wf = django_ojs.group([job("big.x", [i], queue="big") for i in range(60)])
    html = admin_client.get(page(wf.pk)).content.decode()
    assert "+20 more" in html


def test_cancel_action_confirms_then_cancels(db):
    client = operator("ojs.view_workflow", "ojs.cancel_job")
    wf = django_ojs.chain(job("x.a", queue="x"), job("x.b", queue="x"))
    response = ask(client, LIST, "cancel_workflows", [wf.pk])
    assert response.status_code == 200
    assert "Cancel these workflows?" in response.content.decode()
    assert Workflow.objects.get(pk=wf.pk).state == "running"
    response = confirm(client, LIST, "cancel_workflows", [wf.pk])
    assert messages_of(response) == ["1 cancelled"]
    assert Workflow.objects.get(pk=wf.pk).state == "cancelled"
    assert set(Job.objects.filter(workflow=wf).values_list("state", flat=True)) == {"cancelled"}


def test_retry_failed_step_resumes_the_chain(db):
    client = operator("ojs.view_workflow", "ojs.retry_job")
    wf = django_ojs.chain(job("r.a", queue="r"), job("r.b", queue="r"))
    failed = fail_step("r")
    assert Workflow.objects.get(pk=wf.pk).state == "failed"
    assert (
        "send the failed steps"
        in ask(client, LIST, "retry_failed_steps", [wf.pk]).content.decode().lower()
    )
    response = confirm(client, LIST, "retry_failed_steps", [wf.pk])
    assert messages_of(response) == ["1 retried"]
    wf.refresh_from_db()
    assert (wf.state, wf.failed, wf.cancelled) == ("running", 0, 0)
    assert Job.objects.get(pk=failed.pk).state == "available"
    # Retrying again is refused: no failed step left.
    response = confirm(client, LIST, "retry_failed_steps", [wf.pk])
    assert "1 skipped" in messages_of(response)[0]


def test_actions_need_their_permissions(db):
    client = operator("ojs.view_workflow")
    wf = django_ojs.group(job("p.a", queue="p"))
    confirm(client, LIST, "cancel_workflows", [wf.pk])
    assert Workflow.objects.get(pk=wf.pk).state == "running"
