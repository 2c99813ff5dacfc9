"""A receiver connected to ``event_emitted`` must not switch any PostgreSQL path off.

Each operation is counted in statements (savepoints aside) with a receiver connected, and
the receiver must get exactly the events that were stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_ojs
from django_ojs import lifecycle, signals
from django_ojs.models import Event

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]


@pytest.fixture
def received() -> Iterator[list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []

    def receiver(sender: Any, event: dict[str, Any], **kwargs: Any) -> None:
        got.append(event)

    signals.event_emitted.connect(receiver)
    try:
        yield got
    finally:
        signals.event_emitted.disconnect(receiver)


def statements(ctx: CaptureQueriesContext) -> list[str]:
    return [
        q["sql"]
        for q in ctx.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


def assert_signalled_as_stored(received: list[dict[str, Any]], kinds: set[str]) -> None:
    assert received, "the receiver got nothing"
    assert {e["type"] for e in received} == kinds
    ids = [e["id"].removeprefix("evt_") for e in received]  # wire ids are evt_<uuid>
    stored = set(Event.objects.filter(id__in=ids).values_list("id", "type"))
    assert {(str(i), t) for i, t in stored} == set(
        zip(ids, (e["type"] for e in received), strict=True)
    )


def test_single_push_is_one_statement(received, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        django_ojs.enqueue("fast.one", [1])
    assert len(statements(q)) == 1
    assert_signalled_as_stored(received, {"job.enqueued"})


def test_bulk_push_copies_and_returns_its_events(received, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        django_ojs.enqueue_many([{"type": "fast.bulk", "args": [i]} for i in range(20)])
    sql = statements(q)
    assert len(sql) == 3, sql  # COPY jobs, INSERT … RETURNING events, queues + NOTIFY
    assert sql[0].startswith("COPY ojs_job")
    assert len(received) == 20
    assert_signalled_as_stored(received, {"job.enqueued"})


def test_fetch_claims_in_one_statement(received, django_capture_on_commit_callbacks):
    django_ojs.enqueue_many([{"type": "fast.fetch", "args": [i]} for i in range(5)])
    received.clear()
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        jobs = lifecycle.fetch(["default"], 5, worker_id="w-fast")
    assert len(jobs) == 5
    sql = statements(q)
    assert len(sql) == 3, sql  # lazy promotion, worker upsert, claim (+ job.started)
    assert sum("FOR UPDATE SKIP LOCKED" in s for s in sql) == 1
    assert_signalled_as_stored(received, {"job.started"})


def test_a_fetch_that_leaves_room_looks_for_limited_jobs_once():
    # An idle worker's poll: the claim, then one look for rate-limited jobs (none here).
    with CaptureQueriesContext(connection) as q:
        assert lifecycle.fetch(["default"], 5, worker_id="w-fast") == []
    sql = statements(q)
    assert len(sql) == 4, sql  # lazy promotion, worker upsert, claim, limited jobs


def test_ack_and_ack_many_are_one_statement_each(received, django_capture_on_commit_callbacks):
    django_ojs.enqueue_many([{"type": "fast.ack", "args": [i]} for i in range(4)])
    jobs = lifecycle.fetch(["default"], 4, worker_id="w-fast")
    received.clear()
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        lifecycle.ack(jobs[0].id, {"n": 0}, worker_id="w-fast")
    assert len(statements(q)) == 1
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        done = lifecycle.ack_many(
            [(job.id, job.attempt, {"n": i}) for i, job in enumerate(jobs[1:])],
            worker_id="w-fast",
        )
    assert len(done) == 3
    assert len(statements(q)) == 1
    assert len(received) == 4
    assert_signalled_as_stored(received, {"job.completed"})


def _prepared_pushes() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%INSERT INTO ojs_job%"],
        )
        return int(cursor.fetchone()[0])


def test_hot_statements_are_prepared_on_the_server():
    # Django opens connections with prepare_threshold=None; the driver's own cursors
    # still get statements parsed and planned once per connection.
    for i in range(8):
        django_ojs.enqueue("fast.prepared", [i])
    assert _prepared_pushes() == 1
    assert Event.objects.filter(type="job.enqueued").count() == 8


@pytest.mark.django_db(transaction=True)
def test_an_explicit_prepare_threshold_of_none_is_respected():
    # Behind a transaction-mode PgBouncer older than 1.21 preparation must stay off.
    options = connection.settings_dict.setdefault("OPTIONS", {})
    connection.close()
    options["prepare_threshold"] = None
    try:
        for i in range(8):
            django_ojs.enqueue("fast.unprepared", [i])
        assert connection.connection.prepare_threshold is None
        assert _prepared_pushes() == 0
    finally:
        del options["prepare_threshold"]
        connection.close()
