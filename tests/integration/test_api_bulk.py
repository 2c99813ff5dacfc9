"""The bulk-operations extension (ojs-bulk-operations.md): /ojs/v1/jobs/bulk and
/jobs/bulk/{cancel,retry,delete}, partial and atomic modes, the limit, idempotency keys."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.lifecycle.idempotency import fingerprint
from django_ojs.models import AuditEntry, Event, IdempotencyKey, Job
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

B = "/jobs/bulk"


@pytest.fixture
def api(db):
    return client("admin")


def job(n: int, **extra) -> dict:
    return {"type": "user.import", "args": [{"n": n}], **extra}


def states() -> dict[str, str]:
    return {str(j.id): j.state for j in Job.objects.all()}


# ---------------------------------------------------------------------- enqueue


def test_enqueue__partial_all_created_is_201_with_items_in_order(api):
    response = api.post(B, {"jobs": [job(0), job(1), job(2, queue="imports")]})

    assert response.status_code == 201, response.body
    body = response.body
    assert (body["total"], body["succeeded"], body["failed"]) == (3, 3, 0)
    assert [i["index"] for i in body["items"]] == [0, 1, 2]
    assert {i["status"] for i in body["items"]} == {"created"}
    assert body["items"][2]["job"]["queue"] == "imports"
    assert body["items"][0]["job"]["state"] == "available"
    assert response["X-OJS-Batch-Size"] == "3"
    assert Job.objects.count() == 3
    event = Event.objects.get(type="bulk.enqueue.completed")
    assert event.data["total"] == 3 and event.data["succeeded"] == 3
    assert event.data["atomicity"] == "partial"


def test_enqueue__partial_mixed_is_207_and_keeps_the_good_ones(api):
    response = api.post(B, {"jobs": [job(0), {"type": "", "args": []}, job(2)]})

    assert response.status_code == 207, response.body
    items = response.body["items"]
    assert [i["status"] for i in items] == ["created", "failed", "created"]
    assert items[1]["error"]["code"] == "invalid_payload" and "job" not in items[1]
    assert set(states()) == {items[0]["job"]["id"], items[2]["job"]["id"]}


def test_enqueue__partial_all_failed_is_422(api):
    response = api.post(B, {"jobs": [{"type": ""}, {"args": "x"}]})

    assert response.status_code == 422
    assert response.body["failed"] == 2 and Job.objects.count() == 0


def test_enqueue__atomic_failure_creates_nothing_and_names_the_culprit(api):
    response = api.post(B, {"atomicity": "atomic", "jobs": [job(0), {"type": "!"}, job(2)]})

    assert response.status_code == 422
    items = response.body["items"]
    assert [i["status"] for i in items] == ["failed"] * 3
    assert items[1]["error"]["code"] == "invalid_payload"
    assert items[0]["error"]["code"] == items[2]["error"]["code"] == "rolled_back"
    assert items[0]["error"]["details"]["failed_indexes"] == [1]
    assert Job.objects.count() == 0


def test_enqueue__atomic_rolls_back_a_failure_of_the_store_too(api):
    """An item that passes validation but fails when stored (a client id already taken)."""
    taken = django_ojs.enqueue("user.import", [0])
    response = api.post(B, {"atomicity": "atomic", "jobs": [job(1), job(2, id=str(taken.id))]})

    assert response.status_code == 422
    assert response.body["items"][1]["error"]["code"] == "duplicate"
    assert response.body["items"][0]["error"]["code"] == "rolled_back"
    assert list(states()) == [str(taken.id)]


def test_enqueue__atomic_success_is_201(api):
    response = api.post(B, {"atomicity": "atomic", "jobs": [job(0), job(1)]})

    assert response.status_code == 201 and Job.objects.count() == 2


def test_enqueue__unique_ignore_reports_duplicate(api):
    unique = {"keys": ["type", "args"], "on_conflict": "ignore"}
    first = api.post("/jobs", {**job(7), "options": {"unique": unique}}).body["job"]

    response = api.post(B, {"jobs": [{**job(7), "options": {"unique": unique}}, job(8)]})

    assert response.status_code == 201, response.body
    items = response.body["items"]
    assert items[0]["status"] == "duplicate" and items[0]["job"]["id"] == first["id"]
    assert items[1]["status"] == "created"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"jobs": []},
        {"jobs": "x"},
        {"jobs": [job(0)], "atomicity": "all"},
        {"jobs": [job(0)], "mode": "atomic"},
        {"jobs": [job(0)], "idempotency_key": 5},
        {"jobs": [job(0)], "idempotency_key": "k" * 257},
        {"jobs": [job(0)], "idempotency_key": ""},
    ],
)
def test_enqueue__bad_requests_are_400_envelopes(api, body):
    assert_ojs_error(api.post(B, body), 400)
    assert Job.objects.count() == 0


def test_enqueue__needs_the_enqueue_scope(db):
    assert client(None).post(B, {"jobs": [job(0)]}).status_code == 401
    assert_ojs_error(client("worker").post(B, {"jobs": [job(0)]}), 403)
    assert client("producer").post(B, {"jobs": [job(0)]}).status_code == 201


# ---------------------------------------------------------------------- limit


def test_limit__over_it_is_413_with_the_maximum(api, settings):
    settings.OJS_BULK_MAX_ITEMS = 3

    response = api.post(B, {"jobs": [job(i) for i in range(4)]})

    assert_ojs_error(response, 413, "batch_size_exceeded")
    assert response.body["error"]["max_batch_size"] == 3
    assert response.body["error"]["details"] == {"batch_size": 4, "max_batch_size": 3}
    assert response["X-OJS-Max-Batch-Size"] == "3"
    assert api.post(B, {"jobs": [job(i) for i in range(3)]}).status_code == 201

    ids = [j["id"] for j in api.get("/admin/jobs").body["items"]]
    assert_ojs_error(api.post(f"{B}/cancel", {"job_ids": [*ids, ids[0]]}), 413)
    django_ojs.enqueue("user.import", [9])
    assert_ojs_error(api.post(f"{B}/cancel", {"filter": {"type": "user.import"}}), 413)
    assert set(states().values()) == {"available"}


def test_limit__default_is_1000(api):
    response = api.post(B, {"jobs": [job(i) for i in range(1001)]})

    assert_ojs_error(response, 413)
    assert response.body["error"]["max_batch_size"] == 1000


# ---------------------------------------------------------------------- idempotency


def test_idempotency__same_key_and_body_replays_the_stored_answer(api):
    body = {"jobs": [job(0), job(1)], "idempotency_key": "import-42"}
    first = api.post(B, body)
    again = api.post(B, body)

    assert first.status_code == again.status_code == 201
    assert again.body == first.body and again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Job.objects.count() == 2


def test_idempotency__the_header_wins_over_the_body(api):
    headers = {"Idempotency-Key": "from-header"}
    first = api.post(B, {"jobs": [job(0)], "idempotency_key": "a"}, headers=headers)
    again = api.post(B, {"jobs": [job(0)], "idempotency_key": "b"}, headers=headers)

    assert again.body == first.body and Job.objects.count() == 1
    assert set(IdempotencyKey.objects.values_list("key", flat=True)) == {"from-header"}


def test_idempotency__same_key_other_body_is_409(api):
    api.post(B, {"jobs": [job(0)], "idempotency_key": "k"})

    response = api.post(B, {"jobs": [job(1)], "idempotency_key": "k"})

    assert_ojs_error(response, 409, "conflict")
    assert response.body["error"]["details"]["reason"] == "different_body"
    assert Job.objects.count() == 1


def test_idempotency__keys_are_scoped_per_operation(api):
    created = api.post(B, {"jobs": [job(0)], "idempotency_key": "k"}).body
    job_id = created["items"][0]["job"]["id"]

    cancelled = api.post(f"{B}/cancel", {"job_ids": [job_id], "idempotency_key": "k"})

    assert cancelled.status_code == 200 and cancelled.body["cancelled"] == 1
    assert "Idempotent-Replayed" not in cancelled


def test_idempotency__a_claim_its_process_left_unanswered_is_taken_over(api):
    """A request whose process died between claiming its key and storing the answer must
    not block the key with 409 until it expires: after ``ABANDONED_AFTER`` it runs."""
    from django_ojs.lifecycle.idempotency import ABANDONED_AFTER

    body = {"jobs": [job(0)], "idempotency_key": "orphan"}
    claim = IdempotencyKey.objects.create(
        operation="enqueue", key="orphan", fingerprint=fingerprint({"jobs": [job(0)]})
    )
    error = assert_ojs_error(api.post(B, body), 409)  # still in progress, as far as we know
    assert error["details"]["reason"] == "in_progress"
    IdempotencyKey.objects.filter(pk=claim.pk).update(
        created_at=timezone.now() - ABANDONED_AFTER - timedelta(seconds=1)
    )
    response = api.post(B, body)
    assert response.status_code == 201 and Job.objects.count() == 1
    assert api.post(B, body).status_code == 201  # replayed from the new claim's answer
    assert Job.objects.count() == 1


def test_idempotency__a_failed_answer_is_stored_too(api):
    body = {"jobs": [{"type": ""}], "idempotency_key": "bad"}
    assert api.post(B, body).status_code == 422

    again = api.post(B, body)

    assert again.status_code == 422 and again["Idempotent-Replayed"] == "true"


def test_idempotency__after_24_hours_the_key_is_new_and_the_reaper_prunes(api):
    body = {"jobs": [job(0)], "idempotency_key": "old"}
    api.post(B, body)
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=24, seconds=1))

    again = api.post(B, body)

    assert "Idempotent-Replayed" not in again and Job.objects.count() == 2
    IdempotencyKey.objects.update(created_at=timezone.now() - timedelta(hours=25))
    api.post(B, {"jobs": [job(5)], "idempotency_key": "fresh"})

    pruned = reaper.prune_expired()

    assert pruned["idempotency_keys"] == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["fresh"]


def test_idempotency__a_key_held_by_a_running_request_is_409(api):
    """The first request's claim is committed before it runs; a repeat meanwhile waits
    for nothing and runs nothing."""
    IdempotencyKey.objects.create(
        operation="enqueue", key="busy", fingerprint=fingerprint({"jobs": [job(0)]})
    )

    response = api.post(B, {"jobs": [job(0)], "idempotency_key": "busy"})

    assert_ojs_error(response, 409, "conflict")
    assert response.body["error"]["details"]["reason"] == "in_progress"
    assert Job.objects.count() == 0


# ---------------------------------------------------------------------- cancel, retry, delete


def _dead(queue: str = "default") -> Job:
    django_ojs.enqueue("user.import", [1], queue=queue, retry={"max_attempts": 1})
    (claimed,) = lifecycle.fetch([queue], worker_id="w")
    return lifecycle.fail(claimed.id, {"type": "Boom", "message": "no"}, worker_id="w")


def _retryable() -> Job:
    django_ojs.enqueue("user.import", [2], queue="r", retry={"max_attempts": 3})
    (claimed,) = lifecycle.fetch(["r"], worker_id="w")
    return lifecycle.fail(claimed.id, {"type": "Boom", "message": "again"}, worker_id="w")


def _completed() -> Job:
    django_ojs.enqueue("user.import", [3], queue="c")
    (claimed,) = lifecycle.fetch(["c"], worker_id="w")
    return lifecycle.ack(claimed.id, {"ok": True}, worker_id="w")


def test_cancel__by_ids_partial_reports_each_item(api):
    waiting = django_ojs.enqueue("user.import", [0])
    done = _completed()
    unknown = "019539a4-b68c-7def-8000-1a2b3c4d5e6f"

    response = api.post(f"{B}/cancel", {"job_ids": [str(waiting.id), str(done.id), unknown]})

    assert response.status_code == 207, response.body
    body = response.body
    assert (body["total_matched"], body["cancelled"], body["skipped"]) == (3, 1, 2)
    items = body["items"]
    assert [i["status"] for i in items] == ["cancelled", "skipped", "skipped"]
    assert [i["job_id"] for i in items] == [str(waiting.id), str(done.id), unknown]
    assert items[1]["error"]["code"] == "conflict" and items[1]["reason"]
    assert items[2]["error"]["code"] == "not_found"
    assert states()[str(waiting.id)] == "cancelled" and states()[str(done.id)] == "completed"
    entry = AuditEntry.objects.get(action="job.cancel")
    assert entry.job_ids == [str(waiting.id)] and entry.source == "http"
    assert Event.objects.get(type="bulk.cancel.completed").data["cancelled"] == 1


def test_cancel__atomic_with_one_bad_item_cancels_nothing(api):
    a = django_ojs.enqueue("user.import", [0])
    done = _completed()

    response = api.post(
        f"{B}/cancel", {"atomicity": "atomic", "job_ids": [str(a.id), str(done.id)]}
    )

    assert response.status_code == 422
    items = response.body["items"]
    assert items[0]["error"]["code"] == "rolled_back" and items[1]["error"]["code"] == "conflict"
    assert states()[str(a.id)] == "available"
    assert not AuditEntry.objects.filter(action="job.cancel").exists()


def test_cancel__atomic_success_is_200(api):
    ids = [str(django_ojs.enqueue("user.import", [i]).id) for i in range(2)]

    response = api.post(f"{B}/cancel", {"atomicity": "atomic", "job_ids": ids})

    assert response.status_code == 200 and response.body["cancelled"] == 2
    assert set(states().values()) == {"cancelled"}


def test_cancel__by_filter_defaults_to_available_and_scheduled(api):
    django_ojs.enqueue("report.generate", [9], queue="reports")
    (active,) = lifecycle.fetch(["reports"], worker_id="w")
    a = django_ojs.enqueue("report.generate", [0], queue="reports")
    later = django_ojs.enqueue(
        "report.generate", [1], queue="reports", scheduled_at=timedelta(hours=1)
    )
    other_type = django_ojs.enqueue("user.import", [2], queue="reports")

    response = api.post(f"{B}/cancel", {"filter": {"type": "report.generate", "queue": "reports"}})

    assert response.status_code == 200, response.body
    s = states()
    assert s[str(a.id)] == s[str(later.id)] == "cancelled"
    assert s[str(active.id)] == "active"
    assert s[str(other_type.id)] == "available"
    assert response.body["cancelled"] == 2


def test_cancel__filter_by_time_priority_and_meta(api):
    old = django_ojs.enqueue("a.b", [0], priority=5, meta={"tenant": "acme"})
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    django_ojs.enqueue("a.b", [1], priority=5, meta={"tenant": "other"})
    django_ojs.enqueue("a.b", [2], priority=1, meta={"tenant": "acme"})
    recent = django_ojs.enqueue("a.b", [3], priority=5, meta={"tenant": "acme"})
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()

    before = api.post(
        f"{B}/cancel",
        {"filter": {"enqueued_before": cutoff, "priority": 5, "meta": {"tenant": "acme"}}},
    )
    after = api.post(
        f"{B}/cancel",
        {"filter": {"enqueued_after": cutoff, "priority": 5, "meta": {"tenant": "acme"}}},
    )

    assert [i["job_id"] for i in before.body["items"]] == [str(old.id)]
    assert [i["job_id"] for i in after.body["items"]] == [str(recent.id)]
    assert sorted(states().values()) == ["available", "available", "cancelled", "cancelled"]


def test_cancel__a_filter_matching_nothing_is_200(api):
    response = api.post(f"{B}/cancel", {"filter": {"queue": "nowhere"}})

    assert response.status_code == 200
    assert response.body["total_matched"] == 0 and response.body["items"] == []


def test_retry__discarded_and_retryable_back_to_available_others_skipped(api):
    dead, later, waiting = _dead(), _retryable(), django_ojs.enqueue("user.import", [9])

    response = api.post(f"{B}/retry", {"job_ids": [str(dead.id), str(later.id), str(waiting.id)]})

    assert response.status_code == 207, response.body
    body = response.body
    assert (body["retried"], body["skipped"]) == (2, 1)
    assert [i["status"] for i in body["items"]] == ["retried", "retried", "skipped"]
    assert body["items"][2]["error"]["code"] == "conflict"
    s = states()
    assert s[str(dead.id)] == s[str(later.id)] == s[str(waiting.id)] == "available"


def test_retry__by_filter_defaults_to_discarded_and_retryable(api):
    dead, later = _dead(), _retryable()
    django_ojs.enqueue("user.import", [9])

    response = api.post(f"{B}/retry", {"filter": {"type": "user.import"}})

    assert response.status_code == 200
    assert {i["job_id"] for i in response.body["items"]} == {str(dead.id), str(later.id)}


def test_delete__finished_jobs_only(api):
    dead, done = _dead(), _completed()
    waiting = django_ojs.enqueue("user.import", [9])

    response = api.post(f"{B}/delete", {"job_ids": [str(dead.id), str(done.id), str(waiting.id)]})

    assert response.status_code == 207
    assert [i["status"] for i in response.body["items"]] == ["deleted", "deleted", "skipped"]
    assert response.body["deleted"] == 2
    assert list(states()) == [str(waiting.id)]


def test_delete__all_skipped_is_422(api):
    waiting = django_ojs.enqueue("user.import", [9])

    response = api.post(f"{B}/delete", {"job_ids": [str(waiting.id), "not-a-uuid"]})

    assert response.status_code == 422
    assert [i["error"]["code"] for i in response.body["items"]] == ["conflict", "not_found"]


@pytest.mark.parametrize("action", ["cancel", "retry", "delete"])
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"job_ids": ["x"], "filter": {}},
        {"job_ids": []},
        {"job_ids": [1]},
        {"job_ids": "x"},
        {"filter": []},
        {"filter": {"colour": "red"}},
        {"filter": {"state": ["lost"]}},
        {"filter": {"state": []}},
        {"filter": {"priority": "high"}},
        {"filter": {"enqueued_before": "yesterday"}},
        {"filter": {"meta": {"a__b": 1}}},
        {"filter": {"meta": {"a": [1]}}},
        {"filter": {"type": 3}},
        {"job_ids": ["x"], "atomicity": "some"},
        {"job_ids": ["x"], "extra": True},
    ],
)
def test_change__bad_requests_are_400_envelopes(api, action, body):
    assert_ojs_error(api.post(f"{B}/{action}", body), 400)


def test_change__scopes(db):
    waiting = django_ojs.enqueue("user.import", [0])
    ids = {"job_ids": [str(waiting.id)]}

    assert_ojs_error(client("producer").post(f"{B}/cancel", ids), 403)
    assert_ojs_error(client("operator").post(f"{B}/delete", ids), 403)
    assert client("operator").post(f"{B}/cancel", ids).status_code == 200


def test_change__a_key_limited_to_some_queues(db):
    from django_ojs import apikeys

    _, secret = apikeys.create("mail-only", "operator", queues=["mail"])
    mail_only = client(None)
    mail_only.headers["Authorization"] = f"Bearer {secret}"
    mine = django_ojs.enqueue("user.import", [0], queue="mail")
    theirs = django_ojs.enqueue("user.import", [1], queue="billing")

    assert_ojs_error(mail_only.post(f"{B}/cancel", {"job_ids": [str(theirs.id)]}), 403)
    response = mail_only.post(f"{B}/cancel", {"filter": {}})

    assert [i["job_id"] for i in response.body["items"]] == [str(mine.id)]
    assert states()[str(theirs.id)] == "available"


def test_manifest__lists_the_extension(api):
    official = api.get("/ojs/manifest").body["extensions"]["official"]

    assert {
        "name": "bulk-operations", "uri": "urn:ojs:ext:bulk-operations", "version": "1.0.0-rc.1",
    } in official  # fmt: skip


def test_unstorable_text__is_refused_or_kept_readable(api):
    """NUL and lone surrogates: PostgreSQL cannot hold them (a 400, never a 5xx), and an
    answer echoing one is stored with U+FFFD in its place, so its key still replays."""
    assert_ojs_error(api.post(B, {"jobs": [job(0)], "idempotency_key": "a\u0000b"}), 400)
    assert_ojs_error(api.post(f"{B}/cancel", {"filter": {"queue": "q\ud800"}}), 400)
    assert_ojs_error(api.post(f"{B}/cancel", {"filter": {"meta": {"k": "\u0000"}}}), 400)
    body = {"jobs": [{"type": "bad\u0000type"}], "idempotency_key": "echo"}

    first = api.post(B, body)
    again = api.post(B, body)

    assert first.status_code == again.status_code == 422
    assert again["Idempotent-Replayed"] == "true"
    assert IdempotencyKey.objects.get().status == 422
