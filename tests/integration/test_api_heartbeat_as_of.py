"""``as_of`` on ``POST /ojs/v1/workers/heartbeat``: an HTTP worker hands back lost claims.

An extension field (not in the OJS HTTP binding): the worker sends a time the *server*
gave it (a heartbeat reply's ``server_time``, a fetched job's ``started_at``) and vouches
that ``active_jobs`` lists every job it received from the fetches the server answered
before it. Jobs claimed for it before that time and missing from the list never reached
it: they go back to ``available`` with their attempt unspent, as for ``ojs_worker``
(``tests/integration/test_lost_claim_replies.py``). Without ``as_of`` nothing is released.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.models import Event, Job
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api():
    return client("worker")


def lost_claim(worker_id: str, *, earlier: timedelta = timedelta(0)) -> Job:
    """A job claimed for ``worker_id`` whose reply never reached it; ``earlier`` moves its
    claim back in time (the fetch whose reply was lost came before the later ones)."""
    django_ojs.enqueue("a", queue="lost")
    (job,) = lifecycle.fetch(["lost"], worker_id=worker_id)
    if earlier:
        Job.objects.filter(pk=job.pk).update(started_at=F("started_at") - earlier)
    return job


def beat(api, **body):
    response = api.post("/workers/heartbeat", {"worker_id": "http-1", **body})
    assert response.status_code == 200, response.body
    return response.body


def test_a_claim_before_a_fetched_jobs_started_at_and_not_listed_is_released(api):
    lost = lost_claim("http-1", earlier=timedelta(seconds=5))
    django_ojs.enqueue("b")
    (received,) = api.fetch(worker_id="http-1")

    reply = beat(api, active_jobs=[received["id"]], as_of=received["started_at"])

    assert reply["jobs_extended"] == [received["id"]]
    stored = Job.objects.get(pk=lost.pk)
    assert (stored.state, stored.attempt, stored.errors) == ("available", 0, [])
    event = Event.objects.get(job_id=lost.pk, type="job.released")
    assert event.data["reason"] == "claim_not_received" and event.data["worker_id"] == "http-1"
    assert Job.objects.get(pk=received["id"]).state == "active"


def test_a_claim_after_the_server_time_given_is_kept(api):
    # The time of a reply; then a fetch whose reply is still on its way (or lost).
    server_time = beat(api, active_jobs=[])["server_time"]
    in_flight = lost_claim("http-1")

    beat(api, active_jobs=[], as_of=server_time)

    assert Job.objects.get(pk=in_flight.pk).state == "active"
    assert not Event.objects.filter(type="job.released").exists()


def test_without_as_of_nothing_is_released(api):
    lost = lost_claim("http-1", earlier=timedelta(seconds=5))
    beat(api, active_jobs=[])
    assert Job.objects.get(pk=lost.pk).state == "active"


def test_another_workers_claims_are_never_released(api):
    theirs = lost_claim("http-2", earlier=timedelta(seconds=5))
    server_time = beat(api, active_jobs=[])["server_time"]
    beat(api, active_jobs=[], as_of=server_time)
    assert Job.objects.get(pk=theirs.pk).state == "active"


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        (1764236400, "RFC 3339"),
        ("+PT5S", "RFC 3339"),
        ("2026-11-27T10:00:00", "timezone"),
        ("yesterday", "RFC 3339"),
        ("2999-01-01T00:00:00Z", "later than the server's time"),
    ],
)
def test_an_as_of_the_server_cannot_have_sent_is_a_400_and_releases_nothing(api, as_of, message):
    lost = lost_claim("http-1", earlier=timedelta(seconds=5))
    response = api.post(
        "/workers/heartbeat", {"worker_id": "http-1", "active_jobs": [], "as_of": as_of}
    )
    error = assert_ojs_error(response, 400, "invalid_payload")
    assert error["details"]["field"] == "as_of" and message in error["message"]
    assert Job.objects.get(pk=lost.pk).state == "active"


def test_web_processes_clocks_may_differ_by_up_to_a_second(api):
    # A reply's time from a web process whose clock is ahead of this one's: accepted, and
    # a claim made since (by a process whose clock is behind) is not taken for a lost one.
    ahead = (timezone.now() + timedelta(milliseconds=900)).isoformat()
    in_flight = lost_claim("http-1")
    beat(api, active_jobs=[], as_of=ahead)
    assert Job.objects.get(pk=in_flight.pk).state == "active"
    # Further ahead than that, it cannot be a time a server sent.
    beyond = (timezone.now() + timedelta(seconds=30)).isoformat()
    response = api.post("/workers/heartbeat", {"worker_id": "http-1", "as_of": beyond})
    assert_ojs_error(response, 400, "invalid_payload")
