"""Unique jobs (OJS unique-jobs extension) through the Python API and over HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.exceptions import DuplicateJob, ValidationError
from django_ojs.models import Event, Job
from tests.integration.api_support import assert_ojs_error, client
from tests.threads import run_threads

pytestmark = pytest.mark.django_db

BY_ARGS = {"keys": ["type", "args"]}


def _push(args=(1,), type="report.build", **unique):
    return django_ojs.enqueue(type, list(args), unique={**BY_ARGS, **unique})


def test_reject_raises_with_the_existing_job():
    first = _push()
    with pytest.raises(DuplicateJob) as info:
        _push()
    assert info.value.details["existing_job_id"] == str(first.id)
    assert info.value.details["existing_job_state"] == "available"
    assert info.value.details["unique_key"] == first.unique_key
    assert Job.objects.count() == 1
    _push(args=(2,))  # other args: other work
    assert Job.objects.count() == 2


def test_ignore_returns_the_existing_job_and_inserts_nothing():
    first = _push(on_conflict="ignore")
    again = _push(on_conflict="ignore")
    assert again.id == first.id and again.deduplicated
    assert Job.objects.count() == 1


def test_replace_cancels_the_existing_job_with_its_event():
    first = _push(on_conflict="replace")
    second = _push(on_conflict="replace")
    assert second.id != first.id
    first.refresh_from_db()
    assert first.state == "cancelled"
    assert Event.objects.filter(job_id=first.id, type="job.cancelled").exists()
    assert Job.objects.get(pk=second.id).state == "available"


def test_replace_except_schedule_keeps_the_original_time():
    when = timezone.now() + timedelta(hours=2)
    first = django_ojs.enqueue(
        "report.build", [1], scheduled_at=when,
        unique={**BY_ARGS, "on_conflict": "replace_except_schedule"},
    )  # fmt: skip
    second = django_ojs.enqueue(
        "report.build", [1], meta={"v": 2},
        unique={**BY_ARGS, "on_conflict": "replace_except_schedule"},
    )  # fmt: skip
    second.refresh_from_db()
    assert second.state == "scheduled" and second.scheduled_at == first.scheduled_at
    assert second.meta == {"v": 2}
    assert Job.objects.get(pk=first.id).state == "cancelled"


def test_states_limit_which_jobs_block():
    first = _push(states=["available"])
    lifecycle.fetch(["default"], worker_id="w-1")
    second = _push(states=["available"])  # the first is active: it no longer blocks
    assert second.id != first.id
    with pytest.raises(DuplicateJob):
        _push(states=["available", "active"])


def test_finished_jobs_do_not_block_by_default():
    first = _push()
    (job,) = lifecycle.fetch(["default"], worker_id="w-1")
    lifecycle.ack(job.id, worker_id="w-1")
    assert _push().id != first.id


def test_period_counts_from_the_existing_jobs_creation():
    first = _push(period="PT1H")
    Job.objects.filter(pk=first.id).update(created_at=timezone.now() - timedelta(hours=2))
    assert _push(period="PT1H").id != first.id
    with pytest.raises(DuplicateJob):
        _push(period="PT1H")


def test_batch_conflicts_inside_the_batch_and_is_all_or_nothing():
    with pytest.raises(DuplicateJob) as info:
        django_ojs.enqueue_many(
            [{"type": "t", "args": [1], "unique": BY_ARGS}, {"type": "u"},
             {"type": "t", "args": [1], "unique": BY_ARGS}]
        )  # fmt: skip
    assert info.value.details["index"] == 2
    assert Job.objects.count() == 0
    jobs = django_ojs.enqueue_many(
        [{"type": "t", "args": [1], "unique": {**BY_ARGS, "on_conflict": "ignore"}}] * 3
    )
    assert len({j.id for j in jobs}) == 1 and Job.objects.count() == 1


def test_rollback_releases_the_key():
    with pytest.raises(RuntimeError), transaction.atomic():
        _push()
        raise RuntimeError
    assert _push().state == "available"


def test_jobs_without_a_policy_are_never_deduplicated():
    django_ojs.enqueue("report.build", [1])
    django_ojs.enqueue("report.build", [1])
    assert Job.objects.filter(unique_key__isnull=True).count() == 2


def test_bad_policy_is_a_validation_error():
    with pytest.raises(ValidationError) as info:
        django_ojs.enqueue("t", [], unique={"keys": ["meta"]})
    assert info.value.field == "unique.meta_keys"


def test_named_priorities_are_aliases_of_core_numbers():
    assert [django_ojs.enqueue("t", priority=p).priority for p in ("HIGH", "normal", "Low")] == [
        10, 0, -10,
    ]  # fmt: skip
    with pytest.raises(ValidationError):
        django_ojs.enqueue("t", priority="urgent")


# ------------------------------------------------------------------------------ HTTP


def _body(on_conflict="reject", **extra):
    return {"type": "hook.receive", "args": [{"id": "evt_1"}],
            "options": {"unique": {"keys": ["type", "args"], "on_conflict": on_conflict, **extra}}}  # fmt: skip


def test_http_reject_is_409_duplicate_with_the_existing_id():
    api = client("producer")
    first = api.post("/jobs", _body())
    assert first.status_code == 201
    error = assert_ojs_error(api.post("/jobs", _body()), 409, "duplicate")
    assert error["details"]["existing_job_id"] == first.body["job"]["id"]


def test_http_ignore_is_200_with_the_existing_job():
    api = client("producer")
    first = api.post("/jobs", _body("ignore"))
    again = api.post("/jobs", _body("ignore"))
    assert again.status_code == 200
    assert again.body["job"]["id"] == first.body["job"]["id"] and again.body["deduplicated"]


def test_http_batch_marks_deduplicated_jobs():
    api = client("producer")
    response = api.post("/jobs/batch", {"jobs": [_body("ignore"), _body("ignore")]})
    assert response.status_code == 201, response.body
    ids = [j["id"] for j in response.body["jobs"]]
    assert ids[0] == ids[1] and response.body["jobs"][1]["deduplicated"] is True


def test_http_bad_policy_is_400():
    response = client("producer").post("/jobs", _body(period="soon"))
    assert_ojs_error(response, 400)


# ---------------------------------------------------------------------- concurrency


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch", [False, True])
def test_concurrent_pushes_of_one_key_create_exactly_one_job(batch):
    threads = 16 if connection.vendor == "postgresql" else 4
    outcomes: list[str] = []

    def push(index):
        spec = {"type": "hook.receive", "args": ["evt_1"], "unique": {"keys": ["args"]}}
        try:
            if batch:
                django_ojs.enqueue_many([{"type": "other", "args": [index]}, spec])
            else:
                django_ojs.enqueue(spec["type"], spec["args"], unique=spec["unique"])
            outcomes.append("created")
        except DuplicateJob:
            outcomes.append("duplicate")

    run_threads(threads, push)
    assert sorted(outcomes) == ["created"] + ["duplicate"] * (threads - 1)
    assert Job.objects.filter(type="hook.receive").count() == 1
    # a refused batch left nothing behind (all or nothing)
    assert Job.objects.filter(type="other").count() == (1 if batch else 0)
