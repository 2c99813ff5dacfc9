"""``GET /ojs/v1/events``: filters and keyset pagination over the event table."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_ojs
from django_ojs.ids import uuid7_at, uuid7_time
from django_ojs.models import Event
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    return client("admin")


def run_one(api, queue: str = "ev", type: str = "test.echo") -> str:
    job = api.enqueue(type, ["x"], queue=queue)
    api.fetch(queue, worker_id="w")
    api.post("/workers/ack", {"job_id": job["id"], "result": {"ok": True}})
    return job["id"]


def test_events__lifecycle_in_order_with_the_conformance_fields(api):
    job_id = run_one(api)
    events = api.get(f"/events?job_id={job_id}").body["events"]
    assert [e["type"] for e in events] == ["job.enqueued", "job.started", "job.completed"]
    completed = events[-1]
    assert completed["data"]["job_type"] == "test.echo" and completed["data"]["queue"] == "ev"
    assert completed["data"]["attempt"] == 1 and "duration_ms" in completed["data"]
    assert (completed["job_id"], completed["queue"], completed["state"]) == (
        job_id,
        "ev",
        "completed",
    )
    assert completed["specversion"] == "1.0" and completed["id"].startswith("evt_")
    assert completed["time"] == completed["timestamp"] and completed["subject"] == job_id


def test_events__filter_by_types_and_queues(api):
    run_one(api, queue="a")
    run_one(api, queue="b")
    body = api.get("/events?types=job.completed&queues=b").body
    assert [(e["type"], e["data"]["queue"]) for e in body["events"]] == [("job.completed", "b")]
    both = api.get("/events?types=job.enqueued,job.completed&queues=a").body["events"]
    assert [e["type"] for e in both] == ["job.enqueued", "job.completed"]
    repeated = api.get("/events?types=job.started&types=job.completed&queues=a").body["events"]
    assert [e["type"] for e in repeated] == ["job.started", "job.completed"]


def test_events__filter_by_job_types(api):
    run_one(api, type="mail.send")
    run_one(api, type="report.build")
    events = api.get("/events?job_types=report.build").body["events"]
    assert {e["data"]["job_type"] for e in events} == {"report.build"}


def test_events__since_and_after(api):
    run_one(api)
    first = Event.objects.order_by("seq").first()
    after = api.get(f"/events?after=evt_{first.id}").body
    assert after["pagination"]["total"] == 2
    since = first.time.isoformat()
    assert api.get("/events").body["pagination"]["total"] == 3
    assert api.get(f"/events?since={since.replace('+00:00', 'Z')}").body["pagination"]["total"] == 3


def test_events__keyset_pages_see_every_event_once_even_when_new_ones_arrive(api):
    for _ in range(3):
        run_one(api)  # 9 events
    page = api.get("/events?limit=4").body
    seen = [e["id"] for e in page["events"]]
    assert page["pagination"]["has_more"] is True
    run_one(api)  # 3 more while we page
    while page["pagination"]["has_more"]:
        page = api.get(f"/events?limit=4&cursor={page['pagination']['next_cursor']}").body
        seen += [e["id"] for e in page["events"]]
    assert len(seen) == len(set(seen)) == 12


def test_events__answer_the_events_spec_and_admin_list_shapes(api):
    run_one(api)
    run_one(api)  # 6 events
    first = api.get("/events?limit=4").body
    assert first["items"] == first["events"] and len(first["events"]) == 4
    assert first["has_more"] is True and first["cursor"] == first["events"][-1]["id"]
    # Events §6.4: the cursor goes back as after=, and the rest follows, once each.
    rest = api.get(f"/events?limit=4&after={first['cursor']}").body
    assert len(rest["events"]) == 2 and rest["has_more"] is False
    ids = [e["id"] for e in first["events"] + rest["events"]]
    assert len(set(ids)) == 6
    assert rest["cursor"] == rest["events"][-1]["id"]
    empty = api.get(f"/events?after={rest['cursor']}").body
    assert empty["events"] == [] and empty["cursor"] == rest["cursor"]
    assert empty["has_more"] is False


def test_events__every_event_id_starts_with_its_time(api):
    """Ids are found through the time index (EventQuerySet.with_id): whichever path
    made an event (SQL of a push, claim or ACK, or Python), its id's millisecond is its
    time's."""
    run_one(api)
    django_ojs.enqueue_many([{"type": "test.echo", "args": [i]} for i in range(3)])
    api.post("/queues/ev/pause")
    events = list(Event.objects.all())
    assert {e.type for e in events} >= {"job.enqueued", "job.started", "job.completed"}
    assert "queue.paused" in {e.type for e in events}
    for event in events:
        assert event.id.version == 7
        assert uuid7_time(event.id) == event.time.replace(
            microsecond=event.time.microsecond // 1000 * 1000
        ), event.type
    assert len({e.id for e in events}) == len(events)


@pytest.mark.parametrize(
    ("lag", "found"), [(timedelta(seconds=4), True), (timedelta(seconds=6), False)]
)
def test_events__after_an_event_whose_id_was_taken_after_its_time(api, lag, found):
    """Events stored before ids were made from their time took the clock of the
    statement that stored them, a little later: they are looked for up to
    LEGACY_EVENT_ID_LAG back, and no further (no search of the whole table)."""
    run_one(api)
    first = Event.objects.order_by("seq").first()
    Event.objects.filter(seq=first.seq).update(id=uuid7_at(first.time + lag))
    first.refresh_from_db()
    response = api.get(f"/events?after=evt_{first.id}")
    if found:
        assert response.body["pagination"]["total"] == 2
    else:
        assert_ojs_error(response, 400, "invalid_request")


def test_events__unknown_after_is_400(api):
    error = assert_ojs_error(
        api.get("/events?after=evt_01960000-0000-7000-8000-000000000001"), 400, "invalid_request"
    )
    assert error["details"]["field"] == "after"


def test_events__bad_since_is_400(api):
    assert_ojs_error(api.get("/events?since=yesterday"), 400, "invalid_request")
