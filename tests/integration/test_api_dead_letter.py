"""Dead letter endpoints (HB §12): list, retry, delete."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_ojs import apikeys
from django_ojs.models import Event, Job
from tests.factories import JobFactory
from tests.integration.api_support import OJSClient, assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


def discarded(**kwargs):
    return JobFactory(discarded=True, **kwargs)


def test_list__discarded_jobs_newest_first_with_their_errors(api):
    old = discarded(discarded_at=timezone.now() - timedelta(hours=1))
    new = discarded()
    JobFactory(completed=True)
    body = api.get("/dead-letter").body
    assert [j["id"] for j in body["jobs"]] == [str(new.id), str(old.id)]
    assert body["jobs"][0]["state"] == "discarded"
    assert body["jobs"][0]["errors"][0]["message"] == "boom"
    assert body["pagination"]["total"] == 2


def test_list__filters_by_queue_and_type(api):
    a = discarded(queue="email", type="email.send")
    discarded(queue="email", type="email.other")
    discarded(queue="reports", type="email.send")
    assert [j["id"] for j in api.get("/dead-letter?queue=email&type=email.send").body["jobs"]] == [
        str(a.id)
    ]


def test_list__pagination(api):
    for _ in range(3):
        discarded()
    first = api.get("/dead-letter?limit=2").body
    assert len(first["jobs"]) == 2 and first["pagination"]["has_more"] is True
    rest = api.get(f"/dead-letter?limit=2&cursor={first['pagination']['next_cursor']}").body
    assert len(rest["jobs"]) == 1 and rest["pagination"]["has_more"] is False
    seen = {j["id"] for j in first["jobs"]} | {j["id"] for j in rest["jobs"]}
    assert len(seen) == 3


def test_retry__back_to_available_with_attempt_zero_and_history_kept(api):
    job = discarded()
    response = api.post(f"/dead-letter/{job.id}/retry", {})
    body = response.body["job"]
    assert response.status_code == 200
    assert (body["state"], body["attempt"]) == ("available", 0)
    assert body["re_enqueued_at"] and len(body["errors"]) == 1
    assert Event.objects.filter(job_id=job.id, type="dead_letter.retried").exists()


def test_retry__without_a_body(api):
    job = discarded()
    assert api.post(f"/dead-letter/{job.id}/retry").body["job"]["state"] == "available"


def test_retry__with_an_override(api):
    job = discarded(queue="email", meta={"a": 1})
    body = api.post(
        f"/dead-letter/{job.id}/retry",
        {"override": {"queue": "email-retry", "meta": {"b": 2}, "retry": {"max_attempts": 9}}},
    ).body["job"]
    assert (body["queue"], body["meta"], body["max_attempts"]) == (
        "email-retry",
        {"a": 1, "b": 2},
        9,
    )


def test_retry__unknown_override_keys_are_400(api):
    job = discarded()
    error = assert_ojs_error(
        api.post(f"/dead-letter/{job.id}/retry", {"override": {"priority": 5}}),
        400,
        "invalid_payload",
    )
    assert error["details"]["field"] == "override"


@pytest.mark.parametrize("trait", [{}, {"completed": True}, {"active": True}])
def test_retry__a_job_not_in_the_dead_letter_queue_is_404(api, trait):
    job = JobFactory(**trait)
    assert_ojs_error(api.post(f"/dead-letter/{job.id}/retry"), 404, "not_found")


def test_delete__removes_the_job(api):
    job = discarded()
    response = api.delete(f"/dead-letter/{job.id}")
    assert response.status_code == 200
    assert response.body == {"deleted": True, "job_id": str(job.id)}
    assert not Job.objects.filter(pk=job.pk).exists()
    assert_ojs_error(api.delete(f"/dead-letter/{job.id}"), 404, "not_found")


def test_delete__a_job_not_in_the_dead_letter_queue_is_404(api):
    job = JobFactory()
    assert_ojs_error(api.delete(f"/dead-letter/{job.id}"), 404, "not_found")
    assert Job.objects.filter(pk=job.pk).exists()


# ------------------------------------------------------------ bulk retry (DLQ §6.2)


@pytest.mark.parametrize("path", ["/dead-letter/retry", "/ojs/v1/admin/dead-letter/retry"])
def test_bulk_retry__every_matching_dead_letter_job_goes_back(api, path):
    billing = [discarded(queue="billing", type="invoice.make") for _ in range(3)]
    other = discarded(queue="billing", type="invoice.send")
    elsewhere = discarded(queue="email", type="invoice.make")
    finished = JobFactory(completed=True, queue="billing", type="invoice.make")
    response = api.post(
        path, {"filter": {"queue": "billing", "type": "invoice.make"}, "confirm": True}
    )
    assert response.status_code == 200, response.body
    body = response.body
    assert (body["matched"], body["succeeded"], body["retried"], body["failed"]) == (3, 3, 3, 0)
    assert {Job.objects.get(pk=j.pk).state for j in billing} == {"available"}
    assert Job.objects.get(pk=other.pk).state == "discarded"
    assert Job.objects.get(pk=elsewhere.pk).state == "discarded"
    assert Job.objects.get(pk=finished.pk).state == "completed"  # not in the dead letter
    assert Event.objects.filter(type="dead_letter.retried").count() == 3


def test_bulk_retry__without_a_filter_retries_all_and_needs_confirm(api):
    jobs = [discarded(queue=q) for q in ("a", "b", "c")]
    assert_ojs_error(api.post("/dead-letter/retry", {}), 400, "invalid_request")
    assert_ojs_error(
        api.post("/dead-letter/retry", {"confirm": True, "filtr": {}}), 400, "invalid_request"
    )
    assert {Job.objects.get(pk=j.pk).state for j in jobs} == {"discarded"}  # nothing yet
    assert api.post("/dead-letter/retry", {"confirm": True}).body["retried"] == 3
    assert {Job.objects.get(pk=j.pk).state for j in jobs} == {"available"}


def test_bulk_retry__a_key_limited_to_some_queues_retries_only_those():
    mine, theirs = discarded(queue="billing"), discarded(queue="email")
    operator = OJSClient(apikeys.create("billing-ops", "operator", queues=["billing"])[1])
    body = operator.post("/dead-letter/retry", {"confirm": True}).body
    assert body["retried"] == 1
    assert Job.objects.get(pk=mine.pk).state == "available"
    assert Job.objects.get(pk=theirs.pk).state == "discarded"
    assert_ojs_error(
        client("producer").post("/dead-letter/retry", {"confirm": True}), 403, "permission_denied"
    )
