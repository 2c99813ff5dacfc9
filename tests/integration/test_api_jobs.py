"""Job endpoints (HB §9): enqueue, batch, info, cancel, activate, in every accepted shape."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from django_ojs.models import Event, Job
from tests.factories import JobFactory
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def api(db):
    return client("admin")


# --------------------------------------------------------------------------- enqueue


def test_enqueue__201_with_location_and_the_complete_envelope(api):
    response = api.post("/jobs", {"type": "email.send", "args": ["a@example.com", {"x": 1}]})
    assert response.status_code == 201
    job = response.body["job"]
    assert response["Location"] == f"/ojs/v1/jobs/{job['id']}"
    assert UUID7.match(job["id"])
    assert job["specversion"] == "1.0"
    assert (job["type"], job["queue"], job["state"], job["attempt"]) == (
        "email.send",
        "default",
        "available",
        0,
    )
    assert job["args"] == ["a@example.com", {"x": 1}] and job["meta"] == {}
    assert STAMP.match(job["created_at"]) and STAMP.match(job["enqueued_at"])
    for absent in ("started_at", "completed_at", "error", "result"):
        assert absent not in job
    assert Job.objects.get(pk=job["id"]).state == "available"


def test_enqueue__options_wrapper_with_ms_durations_and_delay_until(api):
    later = (timezone.now() + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    job = api.enqueue(
        "report.generate",
        [42],
        queue="reports",
        priority=10,
        timeout_ms=60000,
        visibility_timeout_ms=5000,
        delay_until=later,
        tags=["q4"],
        retry={"max_attempts": 5, "initial_interval": "PT1S", "max_interval": "PT5M"},
    )
    assert (job["queue"], job["priority"], job["state"], job["max_attempts"]) == (
        "reports",
        10,
        "scheduled",
        5,
    )
    assert job["timeout_ms"] == 60000 and job["visibility_timeout_ms"] == 5000
    assert job["tags"] == ["q4"] and job["scheduled_at"].startswith(later[:19])
    assert job["retry"]["initial_interval"] == "PT1S"


def test_enqueue__top_level_options_and_seconds(api):
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    body = {
        "type": "a.b",
        "args": [],
        "queue": "email",
        "priority": -5,
        "scheduled_at": later,
        "timeout": 30,
        "visibility_timeout": 2,
    }
    job = api.post("/jobs", body).body["job"]
    assert (job["queue"], job["priority"], job["state"]) == ("email", -5, "scheduled")
    assert job["timeout_ms"] == 30000 and job["visibility_timeout_ms"] == 2000


def test_enqueue__options_win_over_top_level(api):
    body = {"type": "a.b", "args": [], "queue": "top", "options": {"queue": "inner"}}
    assert api.post("/jobs", body).body["job"]["queue"] == "inner"


def test_enqueue__scheduled_at_in_options_and_relative_time(api):
    job = api.enqueue("a.b", [], scheduled_at="+PT1H")
    assert job["state"] == "scheduled"


def test_enqueue__past_delay_is_available_at_once(api):
    assert api.enqueue("a.b", [], delay_until="2020-01-01T00:00:00Z")["state"] == "available"


def test_enqueue__pending_option(api):
    assert api.enqueue("a.b", [], pending=True)["state"] == "pending"


def test_enqueue__unknown_fields_are_preserved_and_system_fields_ignored(api):
    body = {
        "type": "a.b",
        "args": [],
        "x_custom": {"nested": True},
        "state": "completed",
        "attempt": 7,
    }
    job = api.post("/jobs", body).body["job"]
    assert job["x_custom"] == {"nested": True}
    assert (job["state"], job["attempt"]) == ("available", 0)
    assert api.get(f"/jobs/{job['id']}").body["job"]["x_custom"] == {"nested": True}


def test_enqueue__metadata_option_merges_into_meta(api):
    body = {"type": "a.b", "args": [], "meta": {"a": 1}, "options": {"metadata": {"b": 2}}}
    assert api.post("/jobs", body).body["job"]["meta"] == {"a": 1, "b": 2}


def test_enqueue__client_id_is_kept_and_a_second_use_is_409_duplicate(api):
    body = {"type": "a.b", "args": [], "id": "019539a4-aaaa-7000-8000-111111111111"}
    assert api.post("/jobs", body).body["job"]["id"] == body["id"]
    error = assert_ojs_error(api.post("/jobs", body), 409, "duplicate")
    assert error["details"]["existing_job_id"] == body["id"]


def test_enqueue__emits_job_enqueued(api):
    job = api.enqueue("a.b", [], queue="events")
    assert Event.objects.filter(job_id=job["id"], type="job.enqueued").exists()


def test_enqueue__into_a_paused_queue_is_accepted(api):
    api.post("/queues/email/pause")
    assert api.enqueue("a.b", [], queue="email")["state"] == "available"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"args": []}, "type"),
        ({"type": "a.b"}, "args"),
        ({"type": "a.b", "args": {"k": 1}}, "args"),
        ({"type": "Email.Send", "args": []}, "type"),
        ({"type": "a.b", "args": [], "options": {"queue": "Bad Queue"}}, "queue"),
        ({"type": "a.b", "args": [], "options": {"priority": 101}}, "priority"),
        ({"type": "a.b", "args": [], "id": "550e8400-e29b-41d4-a716-446655440000"}, "id"),
        ({"type": "a.b", "args": [], "options": {"delay_until": "2030-01-01T00:00:00"}}, None),
        ({"type": "a.b", "args": [], "meta": []}, "meta"),
        ({"type": "a.b", "args": [], "options": []}, "options"),
    ],
)
def test_enqueue__invalid_envelopes_are_400_invalid_payload(api, body, field):
    error = assert_ojs_error(api.post("/jobs", body), 400, "invalid_payload")
    assert error["retryable"] is False
    if field:
        assert error["details"]["field"] == field


@pytest.mark.parametrize(
    ("retry", "word"),
    [({"max_attempts": -1}, "max_attempts"), ({"backoff_coefficient": 0.5}, "backoff_coefficient")],
)
def test_enqueue__invalid_retry_policy_is_422_validation_error(api, retry, word):
    response = api.post("/jobs", {"type": "a.b", "args": [], "options": {"retry": retry}})
    error = assert_ojs_error(response, 422, "invalid_payload")
    assert error["type"] == "validation_error" and word in error["message"]


# --------------------------------------------------------------------------- batch


def test_batch__creates_all_jobs_in_order(api):
    jobs = [{"type": "a.b", "args": [i], "options": {"queue": "bulk"}} for i in range(5)]
    response = api.post("/jobs/batch", {"jobs": jobs})
    assert response.status_code == 201
    assert response.body["count"] == 5
    assert [j["args"] for j in response.body["jobs"]] == [[i] for i in range(5)]
    assert Job.objects.filter(queue="bulk").count() == 5


def test_batch__one_invalid_job_rejects_the_whole_batch_and_names_its_index(api):
    jobs = [{"type": "a.b", "args": []}, {"type": "a.b"}, {"type": "a.b", "args": []}]
    error = assert_ojs_error(api.post("/jobs/batch", {"jobs": jobs}), 400, "invalid_payload")
    assert error["details"]["index"] == 1 and error["message"].startswith("jobs[1]")
    assert not Job.objects.exists()


def test_batch__a_duplicate_id_rejects_the_whole_batch(api):
    existing = JobFactory()
    jobs = [{"type": "a.b", "args": []}, {"type": "a.b", "args": [], "id": str(existing.id)}]
    assert_ojs_error(api.post("/jobs/batch", {"jobs": jobs}), 409, "duplicate")
    assert Job.objects.count() == 1


@pytest.mark.parametrize("body", [{}, {"jobs": []}, {"jobs": {"type": "a.b"}}])
def test_batch__needs_a_non_empty_list(api, body):
    error = assert_ojs_error(api.post("/jobs/batch", body), 400, "invalid_payload")
    assert error["details"]["field"] == "jobs"


# --------------------------------------------------------------------------- info


def test_info__returns_the_full_job(api):
    job = JobFactory(completed=True, result={"ok": True}, meta={"trace_id": "t"})
    body = api.get(f"/jobs/{job.id}").body["job"]
    assert (body["id"], body["state"], body["result"], body["meta"]) == (
        str(job.id),
        "completed",
        {"ok": True},
        {"trace_id": "t"},
    )


def test_info__unknown_job_is_404_with_resource_details(api):
    error = assert_ojs_error(
        api.get("/jobs/019539a4-0000-7000-8000-000000000000"), 404, "not_found"
    )
    assert error["details"] == {
        "resource_type": "job",
        "resource_id": "019539a4-0000-7000-8000-000000000000",
    }


def test_info__is_read_only(api):
    job = JobFactory()
    first = api.get(f"/jobs/{job.id}").body
    assert api.get(f"/jobs/{job.id}").body == first


# --------------------------------------------------------------------------- cancel


@pytest.mark.parametrize(
    "trait", [{}, {"scheduled": True}, {"pending": True}, {"retryable": True}, {"active": True}]
)
def test_cancel__unfinished_jobs_become_cancelled(api, trait):
    job = JobFactory(**trait)
    response = api.delete(f"/jobs/{job.id}")
    assert response.status_code == 200
    body = response.body["job"]
    assert body["state"] == "cancelled" and STAMP.match(body["cancelled_at"])
    assert body["previous_state"] == (job.state)
    assert Job.objects.get(pk=job.pk).state == "cancelled"


@pytest.mark.parametrize("trait", ["completed", "discarded", "cancelled"])
def test_cancel__terminal_jobs_are_409_conflict(api, trait):
    job = JobFactory(**{trait: True})
    error = assert_ojs_error(api.delete(f"/jobs/{job.id}"), 409, "conflict")
    assert error["details"]["current_state"] == trait


def test_cancel__records_who_cancelled(api):
    job = JobFactory()
    api.delete(f"/jobs/{job.id}")
    event = Event.objects.get(job_id=job.id, type="job.cancelled")
    assert event.data["cancelled_by"].startswith("apikey:")


def test_cancel__unknown_job_is_404(api):
    assert_ojs_error(api.delete("/jobs/01961111-aaaa-7bbb-8ccc-dddddddddddd"), 404, "not_found")


# --------------------------------------------------------------------------- activate


def test_activate__pending_job_becomes_available(api):
    job = JobFactory(pending=True)
    body = api.post(f"/jobs/{job.id}/activate").body["job"]
    assert (body["state"], body["previous_state"]) == ("available", "pending")
    assert STAMP.match(body["activated_at"])


def test_activate__pending_job_with_a_future_time_becomes_scheduled(api):
    job = JobFactory(pending=True, scheduled_at=timezone.now() + timedelta(hours=1))
    assert api.post(f"/jobs/{job.id}/activate", {}).body["job"]["state"] == "scheduled"


def test_activate__a_job_that_is_not_pending_is_409(api):
    job = JobFactory()
    error = assert_ojs_error(api.post(f"/jobs/{job.id}/activate"), 409, "conflict")
    assert error["details"]["current_state"] == "available"


def test_activate__unknown_job_is_404(api):
    assert_ojs_error(
        api.post("/jobs/01961111-aaaa-7bbb-8ccc-dddddddddddd/activate"), 404, "not_found"
    )


def test_get_on_batch_path__405(api):
    assert_ojs_error(api.get("/jobs/batch"), 405, "invalid_request")
