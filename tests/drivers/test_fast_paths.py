"""A receiver connected to ``event_emitted`` must not switch any PostgreSQL path off.

Each operation is counted in statements (savepoints aside) with a receiver connected, and
the receiver must get exactly the events that were stored.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, signals
from django_ojs.drivers import Completion, get_driver
from django_ojs.drivers.postgresql.shapes import LITERAL_LIMIT_UP_TO
from django_ojs.lifecycle import events
from django_ojs.lifecycle.push import PUSH_BATCH
from django_ojs.models import Event, Job, Worker

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]


@pytest.fixture(autouse=True)
def _maintenance_switch_known(
    _forget_maintenance: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fetches read the maintenance switch once per OJS_MAINTENANCE_CACHE_SECONDS per
    process, not once each (tests/integration/test_maintenance.py): count a fetch's
    statements as a busy process makes them, with the switch already read. The same for
    the tenants' limits that pushes and fetches read (lifecycle.tenantlimits)."""
    settings.OJS_MAINTENANCE_CACHE_SECONDS = 3600
    settings.OJS_TENANT_LIMITS_CACHE_SECONDS = 3600
    assert lifecycle.in_maintenance() is False
    assert lifecycle.tenant_limits() == {}
    # Likewise the isolated pools' queues (fair scheduling §6.3), read once a second.
    from django_ojs.conf import settings as ojs_settings
    from django_ojs.lifecycle import isolation

    monkeypatch.setattr(isolation, "REFRESH_SECONDS", 3600.0)
    assert isolation.isolated_queues(ojs_settings.DATABASE) == {}


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


@pytest.mark.django_db(transaction=True)
def test_single_pushes_across_query_logging_reconnections_and_threads():
    """A single push runs on a cursor its connection keeps: pushes still reach the
    database and are logged when queries are, after a reconnection, on any thread."""
    django_ojs.enqueue("fast.kept", [0])
    with CaptureQueriesContext(connection) as q:
        django_ojs.enqueue("fast.kept", [1])
        django_ojs.enqueue("fast.kept", [2])
    assert len(statements(q)) == 2 and all("INSERT INTO ojs_job" in s for s in statements(q))
    django_ojs.enqueue("fast.kept", [3])
    connection.close()
    django_ojs.enqueue("fast.kept", [4])

    def push(n: int) -> None:
        try:
            for i in range(20):
                django_ojs.enqueue("fast.kept", [n, i])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=push, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    args = sorted(Job.objects.filter(type="fast.kept").values_list("args", flat=True))
    assert args == sorted([[i] for i in range(5)] + [[n, i] for n in range(3) for i in range(20)])
    assert Event.objects.filter(data__job_type="fast.kept").count() == 65


@pytest.mark.parametrize("count", [20, PUSH_BATCH * 2 + 1])
def test_bulk_push_is_one_statement_per_batch_and_returns_its_events(
    count, received, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        pushed = django_ojs.enqueue_many([{"type": "fast.bulk", "args": [i]} for i in range(count)])
    sql = statements(q)
    # Pipelined: per batch, one INSERT of its jobs and their events; then the queues.
    batches = -(-count // PUSH_BATCH)
    assert len(sql) == batches + 1, sql
    assert all(s.startswith("WITH pushed AS (INSERT INTO ojs_job") for s in sql[:-1])
    assert sql[-1].lstrip().startswith("INSERT INTO ojs_queue")  # the wake-up: after commit
    assert [e["data"]["job_id"] for e in received] == [str(j.id) for j in pushed]
    assert_signalled_as_stored(received, {"job.enqueued"})
    stored = dict(Job.objects.filter(type="fast.bulk").values_list("id", "args"))
    assert stored == {j.id: j.args for j in pushed}


@pytest.mark.parametrize("count", [5, PUSH_BATCH + 5])
@pytest.mark.parametrize("with_receiver", [False, True])
def test_bulk_push__a_failing_events_statement_fails_the_push_whole(with_receiver, count, request):
    """The statements of a bulk push run pipelined: an error in one still reaches the
    caller as Django's, nothing of the batch stays, and the connection works on."""
    if with_receiver:
        request.getfixturevalue("received")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION pg_temp.refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'events refused'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ojs_event "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse()"
        )
    with pytest.raises(DatabaseError, match="events refused"):
        django_ojs.enqueue_many([{"type": "fast.bulk", "args": [i]} for i in range(count)])
    assert not Job.objects.filter(type="fast.bulk").exists()
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER refuse ON ojs_event")
    assert len(django_ojs.enqueue_many([{"type": "fast.bulk"}, {"type": "fast.bulk"}])) == 2
    assert Event.objects.filter(data__job_type="fast.bulk").count() == 2


#: JSON that COPY's text format and server-side binding must carry unchanged: tab, newline,
#: carriage return, backslash, COPY's NULL marker and end-of-data line, quotes, non-ASCII.
AWKWARD = ["a\tb", "c\\d", "e\nf", "\r", "\\N", "\\.", {'k"': "\\"}, "üé€😀", 1.5, None, True]


@pytest.mark.parametrize("count", [1, 3])
def test_json_values_round_trip_through_the_fast_pushes(count):
    pushed = django_ojs.enqueue_many(
        [
            {"type": "fast.json", "args": AWKWARD, "meta": {"m": "\t\\"}, "tags": ["a\\b"]}
            for _ in range(count)
        ]
    )
    stored = list(Job.objects.filter(id__in=[j.id for j in pushed]))
    assert len(stored) == count
    for job in stored:
        assert (job.args, job.meta, job.tags, job.extra, job.errors) == (
            AWKWARD,
            {"m": "\t\\"},
            ["a\\b"],
            {},
            [],
        )


@pytest.mark.parametrize(
    "meta", [{}, {"m": "\t\\", "trace_id": "t-1", "n": [1, {"x": None}]}], ids=["empty", "full"]
)
def test_json_values_round_trip_through_the_binary_claim_and_completion(meta):
    django_ojs.enqueue("fast.json", AWKWARD, meta=meta)
    django_ojs.enqueue("fast.json", [], meta=meta)
    claimed = lifecycle.fetch(["default"], 2, worker_id="w-json", fields=["args", "meta"])
    assert sorted((j.args, j.meta) for j in claimed) == [([], meta), (AWKWARD, meta)]
    done = lifecycle.ack_many(
        [(j.id, j.attempt, {"r": AWKWARD, "e": {}}) for j in claimed], worker_id="w-json"
    )
    assert len(done) == 2
    for job in Job.objects.filter(id__in=done):
        assert (job.result, job.meta) == ({"r": AWKWARD, "e": {}}, meta)
    started = Event.objects.filter(type="job.started", job_id__in=done)
    assert {e.data.get("trace_id") for e in started} == {meta.get("trace_id")}


def test_fetch_claims_in_one_statement(received, django_capture_on_commit_callbacks):
    django_ojs.enqueue_many([{"type": "fast.fetch", "args": [i]} for i in range(5)])
    received.clear()
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        jobs = lifecycle.fetch(["default"], 5, worker_id="w-fast")
    assert len(jobs) == 5
    sql = statements(q)
    # The claim is one statement: the worker's upsert, the claim (on the condition that
    # nothing is due or limited) and its job.started events; no BEGIN or COMMIT around
    # it. A worker's first fetch in a process also reads whether it is stopping
    # (graceful shutdown §5.1), then once a second.
    claims = [s for s in sql if "FOR UPDATE SKIP LOCKED" in s]
    assert len(claims) == 1 and "INSERT INTO ojs_worker" in claims[0], sql
    assert len(sql) == 2 and "ojs_worker" in next(s for s in sql if s not in claims), sql
    assert Worker.objects.get(id="w-fast").queues == ["default"]
    assert_signalled_as_stored(received, {"job.started"})
    django_ojs.enqueue_many([{"type": "fast.fetch", "args": [i]} for i in range(5)])
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        assert len(lifecycle.fetch(["default"], 5, worker_id="w-fast")) == 5
    sql = statements(q)
    assert len(sql) == 1 and "FOR UPDATE SKIP LOCKED" in sql[0], sql  # the next: the claim


def test_fetch_of_an_empty_queue_still_registers_the_worker():
    assert lifecycle.fetch(["default"], 5, worker_id="w-idle") == []
    # An hour older, so that the refresh shows whatever the clock's resolution.
    before = Worker.objects.get(id="w-idle").last_heartbeat_at - timedelta(hours=1)
    Worker.objects.filter(id="w-idle").update(last_heartbeat_at=before)
    lifecycle.fetch(["default"], 1, worker_id="w-idle")
    assert Worker.objects.get(id="w-idle").last_heartbeat_at > before


def test_fetch_with_a_due_job_promotes_it_and_registers_the_worker_once():
    due = django_ojs.enqueue("fast.due", [1], scheduled_at=timezone.now() + timedelta(hours=1))
    Job.objects.filter(pk=due.id).update(scheduled_at=timezone.now() - timedelta(seconds=1))
    jobs = lifecycle.fetch(["default"], 5, worker_id="w-due")
    assert [j.id for j in jobs] == [due.id]
    assert Worker.objects.filter(id="w-due").count() == 1


def known(worker_id: str) -> None:
    """This process has read ``worker_id``'s state (as after its first fetch): its next
    fetches in the second run the claim alone."""
    from django_ojs.lifecycle import workers

    assert not workers.stopping(worker_id, connection.alias)


def test_a_fetch_of_a_few_fields_is_still_one_claim_statement():
    # The claim sorts what it claimed by priority: asking for other fields must not
    # defer priority and cost one query per job.
    django_ojs.enqueue_many([{"type": "fast.few", "args": [i], "priority": i} for i in range(5)])
    known("w-few")
    with CaptureQueriesContext(connection) as q:
        jobs = lifecycle.fetch(["default"], 5, worker_id="w-few", fields=("type",))
    assert [j.args for j in jobs] == [[4], [3], [2], [1], [0]]  # args: deferred, loaded now
    assert len(statements(q)) == 1  # the claim, with the worker's upsert


def test_a_fetch_that_leaves_room_looks_for_limited_jobs_once():
    # A fetch that registers its worker (HTTP): the claim with the worker's upsert, then
    # one look for due or rate-limited jobs (none here) to tell an empty queue.
    known("w-fast")
    with CaptureQueriesContext(connection) as q:
        assert lifecycle.fetch(["default"], 5, worker_id="w-fast") == []
    sql = statements(q)
    assert len(sql) == 2, sql
    assert "INSERT INTO ojs_worker" in sql[0] and sql[1].lstrip().startswith("SELECT EXISTS")


@pytest.mark.django_db(transaction=True)
def test_an_idle_workers_fetch_is_one_statement_without_a_transaction(received):
    # The in-process worker (register=False) with nothing due and no limits: no BEGIN,
    # no COMMIT, no promotion pass, no separate look; the claim checks that nothing is
    # due or limited and commits by itself.
    django_ojs.enqueue("fast.idle", [1])
    received.clear()
    with CaptureQueriesContext(connection) as q:
        jobs = lifecycle.fetch(["default"], 5, worker_id="w-idle", register=False)
    assert [j.type for j in jobs] == ["fast.idle"]
    sql = statements(q)
    assert len(sql) == 1, sql
    assert "SKIP LOCKED" in sql[0] and "next_attempt_at <=" in sql[0]
    assert not connection.in_atomic_block
    assert Job.objects.get(pk=jobs[0].pk).state == "active"
    assert_signalled_as_stored(received, {"job.started"})


@pytest.mark.django_db(transaction=True)
def test_an_idle_workers_fetch_of_an_empty_queue_is_the_claim_and_one_look():
    with CaptureQueriesContext(connection) as q:
        assert lifecycle.fetch(["default"], 5, worker_id="w-idle", register=False) == []
    sql = statements(q)
    assert len(sql) == 2, sql  # nothing claimed: the look tells "empty" from "held"
    assert "SKIP LOCKED" in sql[0] and sql[1].lstrip().startswith("SELECT EXISTS")


@pytest.mark.django_db(transaction=True)
def test_a_rate_limited_job_sends_an_idle_fetch_down_the_limited_path():
    django_ojs.enqueue("fast.plain", [1], priority=0)
    django_ojs.enqueue("fast.limited", [1], priority=9, rate_limit={"key": "k", "concurrency": 1})
    jobs = lifecycle.fetch(["default"], 5, worker_id="w-idle", register=False)
    # The plain claim, then the limited pass with the room left: both are claimed.
    assert sorted(j.type for j in jobs) == ["fast.limited", "fast.plain"]


@pytest.mark.django_db(transaction=True)
def test_an_idle_fetch_from_several_queues_commits_its_claims_together():
    django_ojs.enqueue("fast.a", [1], queue="a")
    django_ojs.enqueue("fast.b", [1], queue="b")
    with CaptureQueriesContext(connection) as q:
        jobs = lifecycle.fetch(["b", "a"], 5, worker_id="w-idle", register=False)
    assert [j.type for j in jobs] == ["fast.b", "fast.a"]
    sql = [s for s in statements(q) if s not in ("BEGIN", "COMMIT")]
    assert len(sql) == 3, sql  # the look, one claim per queue


@pytest.mark.django_db(transaction=True)
def test_a_due_retry_sends_an_idle_fetch_down_the_promoting_path():
    from datetime import timedelta

    from django.utils import timezone

    django_ojs.enqueue("fast.retry", [1], priority=5)
    Job.objects.update(
        state="retryable", attempt=1, next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    django_ojs.enqueue("fast.plain", [1])
    jobs = lifecycle.fetch(["default"], 1, worker_id="w-idle", register=False)
    assert [j.type for j in jobs] == ["fast.retry"]  # promoted first, then by priority


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


def _plans(like: str) -> list[tuple[int, int]]:
    """(generic, custom) plan counts of this session's prepared statements ``LIKE like``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s ORDER BY prepare_time",
            [like],
        )
        return [(int(g), int(c)) for g, c in cursor.fetchall()]


def _claim_plans() -> list[tuple[int, int]]:
    """(generic, custom) plan counts of this session's prepared claims."""
    return _plans("%claimed AS (%")


def test_small_claims_reuse_one_plan_and_claim_exactly_their_count():
    """With ``LIMIT $n`` PostgreSQL plans a prepared claim again on every call (its reused
    plan must assume a tenth of the queue); a small claim carries its count in the text,
    so once PostgreSQL's five trial plans are made, its plan is reused. Each claim still
    takes exactly the jobs asked for."""
    limit = LITERAL_LIMIT_UP_TO
    # A queue long enough for its length to weigh in the plan (a tenth of it, with $n).
    django_ojs.enqueue_many([{"type": "fast.plan", "args": [i]} for i in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
    fetch = lifecycle.Fetch(["default"], worker_id="w-plan", register=False, fields=["args"])
    assert [len(fetch(3)) for _ in range(12)] == [3] * 12  # prepared, then 5 trial plans
    ((generic, custom),) = _claim_plans()
    assert [len(fetch(3)) for _ in range(8)] == [3] * 8
    assert _claim_plans() == [(generic + 8, custom)]  # the same plan, 8 more times
    # At the boundary the count is still in the text; above it, a parameter.
    assert len(fetch(limit)) == limit
    assert len(fetch(limit + 1)) == limit + 1
    claimed = Job.objects.filter(state="active")
    assert claimed.count() == 20 * 3 + 2 * limit + 1
    assert sorted(j.args[0] for j in claimed) == list(range(claimed.count()))  # in order


def _ack_plans() -> list[tuple[int, int]]:
    """(generic, custom) plan counts of this session's prepared ACK statements."""
    return _plans("%done AS ( UPDATE ojs_job%")


def test_single_acks_reuse_one_plan():
    """An ACK of one job (every HTTP ACK) names it by a scalar id: with ``= ANY($ids)``
    PostgreSQL planned the prepared statement again on every call (its reused plan must
    assume an array of ten); with ``id = $id`` the plan is made once and reused."""
    # A table large and analysed enough for the planner to weigh an array of ten.
    django_ojs.enqueue_many([{"type": "fast.ack", "args": [i]} for i in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
    jobs = lifecycle.fetch(["default"], 40, worker_id="w-ack", register=False)
    for job in jobs[:12]:  # prepared, then PostgreSQL's five trial plans
        assert lifecycle.ack(job.id, {"n": job.args[0]}, worker_id="w-ack").state == "completed"
    ((generic, custom),) = _ack_plans()
    for job in jobs[12:20]:
        lifecycle.ack(job.id, None, worker_id="w-ack")
    assert _ack_plans() == [(generic + 8, custom)]  # the same plan, 8 more times
    assert Job.objects.filter(state="completed").count() == 20
    assert Job.objects.get(pk=jobs[0].id).result == {"n": 0}
    # A batch (the in-process worker's) still completes exactly its jobs.
    written = get_driver("default").complete_many(
        [Completion(j.id, j.attempt, j.args[0]) for j in jobs[20:]], worker_id="w-ack",
        now=timezone.now(), events=events.mode(), source="test", fields=None,
    )  # fmt: skip
    assert sorted(j.result for j in written.jobs) == list(range(20, 40))
    assert Job.objects.filter(state="completed").count() == 40


def test_events_built_in_sql_get_distinct_uuid7_ids_even_after_setseed():
    """Events built by PostgreSQL (a bulk push, a claim, a batch ACK) get UUIDv7 ids of
    their time's millisecond, and no two collide, also when the session reseeded random()
    before each statement (the ids then repeat their random part, not their value)."""
    before = timezone.now()
    with connection.cursor() as cursor:
        for _ in range(2):
            cursor.execute("SELECT setseed(0.5)")
            django_ojs.enqueue_many([{"type": "fast.seeded", "args": [i]} for i in range(300)])
    after = timezone.now()
    ids = list(Event.objects.values_list("id", flat=True))
    assert len(ids) == 600 and len(set(ids)) == 600
    assert {i.version for i in ids} == {7} and {i.variant for i in ids} == {uuid.RFC_4122}
    millis = {i.int >> 80 for i in ids}
    assert int(before.timestamp() * 1000) <= min(millis) <= max(millis)
    assert max(millis) <= int(after.timestamp() * 1000)


def test_hot_statements_stay_in_psycopgs_conversion_cache(
    received, monkeypatch, django_capture_on_commit_callbacks
):
    """psycopg converts a statement's placeholders once and caches the result, but only
    for statements of at most 4,096 characters; a longer one is parsed again on every
    call (35 µs for a claim). The longest shapes: every field, a receiver connected."""
    from psycopg import _queries

    missed: list[int] = []
    real = _queries._query2pg_nocache

    def spy(query: bytes, encoding: str) -> object:
        missed.append(len(query))
        return real(query, encoding)

    monkeypatch.setattr(_queries, "_query2pg_nocache", spy)
    with django_capture_on_commit_callbacks(execute=True):
        django_ojs.enqueue("fast.long", [1])
        django_ojs.enqueue_many([{"type": "fast.long", "args": [i]} for i in range(3)])
        (job,) = lifecycle.fetch(["default"], 1, worker_id="w-long")  # HTTP: every field
        lifecycle.ack(job.id, result={"ok": True}, worker_id="w-long")
        jobs = lifecycle.fetch(["default"], 3, worker_id="w-long", register=False, fields=["args"])
        lifecycle.ack_many([(j.id, j.attempt, None) for j in jobs], worker_id="w-long")
    assert missed == []
    # The receiver was connected: the statements were the ones that return their events.
    assert {e["type"] for e in received} == {"job.enqueued", "job.started", "job.completed"}


@pytest.mark.django_db(transaction=True)
def test_an_idle_fetch_claims_a_job_promoted_after_its_claims_snapshot(monkeypatch):
    """The claim sees a retry due and holds back; the reaper's promotion of it commits
    before the second look: the fetch still returns the job (an HTTP fetch answering
    "no jobs" with one available failed the conformance suite's backoff tests)."""
    job = django_ojs.enqueue("fast.retry", [1])
    Job.objects.filter(pk=job.pk).update(
        state="retryable", attempt=1, next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    driver = type(get_driver("default"))
    real_claim = driver._claim
    claims: list[int] = []

    def claim_then_the_reaper_promotes(self, *args, **kwargs):
        written = real_claim(self, *args, **kwargs)
        claims.append(len(written.jobs))
        if len(claims) == 1:
            assert lifecycle.promote_due() == 1  # the reaper's pass, committed in between
        return written

    monkeypatch.setattr(driver, "_claim", claim_then_the_reaper_promotes)
    got = lifecycle.fetch(["default"], 5, worker_id="w-race", register=False)
    assert claims == [0, 1]  # held back by the due retry, then claimed once more
    assert [j.pk for j in got] == [job.pk]
    assert Job.objects.get(pk=job.pk).state == "active"
