"""GET /ojs/v1/jobs/{id}/progress/stream: server-sent events (progress §7.2).

The unit-like tests read the stream chunk by chunk in the test's thread, changing the job
between two reads (the stream polls with no pause: OJS_PROGRESS_STREAM_POLL_SECONDS=0), so
nothing depends on timing. The last test serves it from pytest-django's threaded WSGI
server, two streams at once, while the test reports progress and acks.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

import django_ojs
from django_ojs import apikeys, lifecycle
from tests.integration.api_support import assert_ojs_error, client


@pytest.fixture
def fast(settings):
    settings.OJS_PROGRESS_STREAM_POLL_SECONDS = 0
    settings.OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS = 3600
    settings.OJS_PROGRESS_STREAM_SECONDS = 3600


def active(queue: str = "default"):
    django_ojs.enqueue("report.build", [1], queue=queue, retry={"max_attempts": 1})
    (job,) = lifecycle.fetch([queue], worker_id="w")
    return job


def events(chunks) -> list[tuple[str, dict]]:
    """``(event, data)`` of each SSE event in ``chunks``; comments as ``(":", {})``."""
    out = []
    for chunk in chunks:
        text = chunk.decode()
        if text.startswith(":"):
            out.append((":", {}))
        elif text.startswith("event:"):
            head, *_, data = text.strip().split("\n")
            out.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def open_stream(api, job_id):
    response = api.get(f"/jobs/{job_id}/progress/stream", headers={"Accept": "text/event-stream"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    stream = iter(response.streaming_content)
    assert next(stream) == b"retry: 3000\n\n"
    return stream


@pytest.mark.django_db
def test_stream__follows_progress_until_completed(fast):
    api = client("operator")
    job = active()
    stream = open_stream(api, job.id)

    assert events([next(stream)]) == [("state", {"state": "active"})]
    lifecycle.report_progress(job.id, 0.4, message="rows", data={"rows": 40}, worker_id="w")
    ((kind, data),) = events([next(stream)])
    assert kind == "progress" and data["progress"] == 0.4 and data["data"] == {"rows": 40}
    assert data["message"] == "rows" and data["updated_at"]
    lifecycle.report_progress(job.id, 0.9, worker_id="w")
    assert events([next(stream)])[0][1]["progress"] == 0.9
    lifecycle.ack(job.id, {"ok": True}, worker_id="w")

    ((kind, data),) = events([next(stream)])
    assert kind == "completed" and data["progress"] == 1.0 and data["state"] == "completed"
    assert list(stream) == []


@pytest.mark.django_db
def test_stream__a_finished_job_ends_at_once_with_its_final_event(fast):
    api = client("admin")
    done = active()
    lifecycle.report_progress(done.id, 0.5, worker_id="w")
    lifecycle.ack(done.id, None, worker_id="w")
    failed = active("q2")
    lifecycle.fail(failed.id, {"type": "Boom", "message": "no", "retryable": False}, worker_id="w")
    cancelled = django_ojs.enqueue("report.build", [2])
    lifecycle.cancel(cancelled.id)

    for job, final in ((done, "completed"), (failed, "failed"), (cancelled, "cancelled")):
        got = events(open_stream(api, job.id))
        assert [kind for kind, _ in got][-1] == final
        assert got[-1][1]["state"] == {"failed": "discarded"}.get(final, final)
    (first, first_data), (last, last_data) = events(open_stream(api, done.id))
    assert first == "progress" and first_data["progress"] == 0.5
    assert last == "completed" and last_data["progress"] == 1.0
    assert last_data["updated_at"] == first_data["updated_at"]


@pytest.mark.django_db
def test_stream__a_reconnect_after_the_final_event_is_204(fast):
    """EventSource reconnects when a stream ends; the final event's id tells us it saw the
    end, and 204 makes it stop."""
    api = client("admin")
    job = active()
    lifecycle.ack(job.id, None, worker_id="w")
    chunks = list(open_stream(api, job.id))
    assert chunks[-1].startswith(b"event: completed\nid: end\ndata: ")

    again = api.get(f"/jobs/{job.id}/progress/stream", headers={"Last-Event-ID": "end"})

    assert again.status_code == 204 and not again.streaming
    # Another id, or a job not finished, streams as usual.
    other = api.get(f"/jobs/{active('q3').id}/progress/stream", headers={"Last-Event-ID": "end"})
    assert other.status_code == 200 and other.streaming


@pytest.mark.django_db
def test_stream__reports_state_changes_such_as_a_retry(fast):
    api = client("admin")
    django_ojs.enqueue("report.build", [1], retry={"max_attempts": 3})
    (job,) = lifecycle.fetch(["default"], worker_id="w")
    stream = open_stream(api, job.id)
    next(stream)

    lifecycle.fail(job.id, {"type": "Boom", "message": "again"}, worker_id="w")

    assert events([next(stream)]) == [("state", {"state": "retryable"})]


@pytest.mark.django_db
def test_stream__heartbeat_comments_while_nothing_changes(fast, settings):
    settings.OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS = 0
    stream = open_stream(client("admin"), active().id)
    next(stream)

    assert next(stream) == b": heartbeat\n\n"
    assert next(stream) == b": heartbeat\n\n"


@pytest.mark.django_db
def test_stream__ends_with_timeout_after_its_duration(fast, settings):
    settings.OJS_PROGRESS_STREAM_SECONDS = 0
    got = events(open_stream(client("admin"), active().id))

    assert got == [("state", {"state": "active"}), ("timeout", {"state": "active"})]


@pytest.mark.django_db
def test_stream__a_job_deleted_while_followed_ends_it(fast):
    api = client("admin")
    job = django_ojs.enqueue("report.build", [1])
    lifecycle.cancel(job.id)
    waiting = django_ojs.enqueue("report.build", [2])
    stream = open_stream(api, waiting.id)
    next(stream)
    lifecycle.cancel(waiting.id)
    lifecycle.purge([waiting.id])

    assert events(stream) == [("state", {"state": "deleted"})]


@pytest.mark.django_db
def test_stream__unknown_job_and_scopes(fast):
    assert_ojs_error(
        client("admin").get("/jobs/019539a4-b68c-7def-8000-1a2b3c4d5e6f/progress/stream"), 404
    )
    assert_ojs_error(client("admin").get("/jobs/nope/progress/stream"), 404)
    job = active()
    assert_ojs_error(client("producer").get(f"/jobs/{job.id}/progress/stream"), 403)
    assert client(None).get(f"/jobs/{job.id}/progress/stream").status_code == 401
    head = client("admin").request("HEAD", f"/jobs/{job.id}/progress/stream")
    assert head.status_code == 200 and not head.streaming and head.content == b""
    # The polling form is unchanged.
    assert client("admin").get(f"/jobs/{job.id}/progress").body["state"] == "active"


def read_event(response) -> tuple[str, dict]:
    """The next SSE event (skipping ``retry:`` and comments) from a raw HTTP response."""
    kind = None
    while True:
        line = response.readline().decode()
        assert line, "the stream ended"
        line = line.rstrip("\n")
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: ") and kind is not None:
            return kind, json.loads(line.removeprefix("data: "))


@pytest.mark.django_db(transaction=True)
def test_stream__two_at_once_from_a_threaded_wsgi_server(live_server, settings):
    settings.OJS_PROGRESS_STREAM_POLL_SECONDS = 0.05
    settings.OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS = 3600
    settings.OJS_PROGRESS_STREAM_SECONDS = 600
    _, key = apikeys.create("stream", "operator")
    job = active()
    address = urlsplit(live_server.url)
    connections, responses = [], []
    for _ in range(2):
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        connection.request(
            "GET", f"/ojs/v1/jobs/{job.id}/progress/stream",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
        )  # fmt: skip
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
        connections.append(connection)
        responses.append(response)
    try:
        # Both streams are open (each has answered) before anything changes.
        assert [read_event(r) for r in responses] == [("state", {"state": "active"})] * 2
        lifecycle.report_progress(job.id, 0.25, worker_id="w")
        for response in responses:
            kind, data = read_event(response)
            assert kind == "progress" and data["progress"] == 0.25
        lifecycle.ack(job.id, None, worker_id="w")
        for response in responses:
            assert read_event(response)[0] == "completed"
            assert response.read() == b"\n"  # the event's blank line, then the end
    finally:
        for connection in connections:
            connection.close()
