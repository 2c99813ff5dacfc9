"""Every lifecycle operation and its error paths, on the database of this run."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from uuid6 import uuid7

import django_ojs
from django_ojs import envelope, lifecycle, queues, signals
from django_ojs.exceptions import (
    DuplicateJob,
    EnvelopeTooLarge,
    InvalidTransition,
    JobNotFound,
    ReservationMismatch,
    ValidationError,
)
from django_ojs.lifecycle.push import PUSH_BATCH
from django_ojs.models import Event, Job, Queue, Worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

NO_JITTER = {"jitter": False, "initial_interval": "PT1S"}


def event_types(job):
    return list(Event.objects.filter(job_id=job.id).order_by("seq").values_list("type", flat=True))


def claim_one(queue="default", worker_id="w1", **kwargs):
    jobs = lifecycle.fetch([queue], worker_id=worker_id, **kwargs)
    assert len(jobs) == 1
    return jobs[0]


# ----------------------------------------------------------------------------- push


def test_enqueue__available_job_with_system_attributes():
    job = django_ojs.enqueue("email.send", ["a@b.c"], queue="email", priority=5, meta={"k": 1})
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "available"
    assert (stored.attempt, stored.max_attempts, stored.priority) == (0, 3, 5)
    assert stored.id.version == 7
    assert stored.created_at == stored.enqueued_at
    assert Queue.objects.filter(name="email").exists()
    assert event_types(job) == ["job.enqueued"]


def test_enqueue__future_scheduled_at_is_scheduled_and_past_is_available():
    later = django_ojs.enqueue("a", scheduled_at=timedelta(minutes=5))
    past = django_ojs.enqueue("a", scheduled_at=timezone.now() - timedelta(minutes=5))
    assert (later.state, past.state) == ("scheduled", "available")
    assert event_types(later) == ["job.scheduled"]


def test_enqueue__pending_wins_over_scheduled_at():
    job = django_ojs.enqueue("a", pending=True, scheduled_at=timedelta(minutes=5))
    assert job.state == "pending"


def test_enqueue__client_id_and_duplicate_id():
    job_id = uuid7()
    job = django_ojs.enqueue("a", id=str(job_id))
    assert job.id == job_id
    with pytest.raises(DuplicateJob) as info:
        django_ojs.enqueue("a", id=job_id)
    assert info.value.details["existing_job_id"] == str(job_id)
    assert Job.objects.count() == 1


def test_enqueue__validation_error_names_field_and_writes_nothing():
    with pytest.raises(ValidationError) as info:
        django_ojs.enqueue("a", ["ok"], queue="Bad Queue")
    assert info.value.field == "queue"
    assert not Job.objects.exists() and not Event.objects.exists()


def test_enqueue__unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        django_ojs.enqueue("a", qeue="typo")


def test_enqueue__retry_policy_and_timeouts_are_stored():
    job = django_ojs.enqueue(
        "a",
        retry={"max_attempts": 5, "initial_interval": "PT2S"},
        timeout=10,
        total_timeout=60,
        enqueue_ttl=30,
        expires_at=timedelta(seconds=45),
    )
    job.refresh_from_db()
    assert job.max_attempts == 5 and job.retry["initial_interval"] == "PT2S"
    assert (job.timeout_ms, job.total_timeout_ms, job.enqueue_ttl_ms) == (10_000, 60_000, 30_000)
    assert job.deadline_at == job.created_at + timedelta(seconds=60)
    # stale_at is the earliest of expires_at, the enqueue TTL and the deadline.
    assert job.stale_at == job.created_at + timedelta(seconds=30)


def test_enqueue_many__all_or_nothing():
    with pytest.raises(ValidationError) as info:
        django_ojs.enqueue_many([{"type": "a"}, {"type": "b", "args": "not a list"}])
    assert info.value.details["index"] == 1
    assert not Job.objects.exists()
    jobs = django_ojs.enqueue_many([{"type": "a", "args": [i], "queue": "bulk"} for i in range(50)])
    assert Job.objects.filter(queue="bulk", state="available").count() == 50
    assert Event.objects.filter(type="job.enqueued").count() == 50
    assert [j.args for j in jobs] == [[i] for i in range(50)]


@contextlib.contextmanager
def emitted(field: str, *, connect: bool = True) -> Iterator[list[Any]]:
    """The ``field`` of each event sent to an ``event_emitted`` receiver inside the block
    (none connected when ``connect`` is false)."""
    got: list[Any] = []

    def receiver(sender: Any, event: dict[str, Any], **kwargs: Any) -> None:
        got.append(event[field])

    if connect:
        signals.event_emitted.connect(receiver)
    try:
        yield got
    finally:
        signals.event_emitted.disconnect(receiver)


def test_enqueue_many__sql_and_python_event_paths_agree(django_capture_on_commit_callbacks):
    """PostgreSQL writes bulk enqueue events in SQL unless a signal receiver needs rows."""
    at = timezone.now() + timedelta(hours=1)
    batch = [
        {"type": "a", "priority": 3, "meta": {"trace_id": "t-9"}},
        {"type": "b", "scheduled_at": at, "queue": "later"},
    ]
    first = django_ojs.enqueue_many(batch)
    with emitted("type") as received, django_capture_on_commit_callbacks(execute=True):
        second = django_ojs.enqueue_many(batch)
    assert received == ["job.enqueued", "job.scheduled"]

    def stored(jobs):
        out = []
        for job in jobs:
            event = Event.objects.get(job_id=job.id)
            data = dict(event.wire_data)
            assert data.pop("job_id") == str(job.id)
            out.append((event.type, event.subject == str(job.id), data))
        return out

    assert stored(first) == stored(second) == [
        ("job.enqueued", True, {"job_type": "a", "queue": "default", "state": "available",
                                "priority": 3, "trace_id": "t-9"}),
        ("job.scheduled", True, {"job_type": "b", "queue": "later", "state": "scheduled",
                                 "scheduled_at": envelope.format_timestamp(at)}),
    ]  # fmt: skip


@pytest.mark.parametrize("receiver", [False, True])
def test_enqueue_many__events_of_a_batch_sharing_some_values(
    receiver, django_capture_on_commit_callbacks
):
    """A value every job of a batch shares goes to the events once, the others per job."""
    at = timezone.now() + timedelta(hours=2)
    batch = [
        {"type": "same", "queue": "shared", "priority": 5, "scheduled_at": at, "args": [i],
         "meta": {"trace_id": "t-1"} if i == 1 else {}}
        for i in range(3)
    ]  # fmt: skip
    with (
        emitted("data", connect=receiver) as received,
        django_capture_on_commit_callbacks(execute=True),
    ):
        jobs = django_ojs.enqueue_many(batch)
    expected = [
        {"job_id": str(job.id), "job_type": "same", "queue": "shared", "state": "scheduled",
         "scheduled_at": envelope.format_timestamp(at)} | ({"trace_id": "t-1"} if i == 1 else {})
        for i, job in enumerate(jobs)
    ]  # fmt: skip
    assert [Event.objects.get(job_id=job.id).wire_data for job in jobs] == expected
    assert [e.type for e in Event.objects.filter(job_id__in=[j.id for j in jobs])] == [
        "job.scheduled"
    ] * 3
    assert received == (expected if receiver else [])


@pytest.mark.parametrize("receiver", [False, True])
@pytest.mark.parametrize(
    "options",
    [{}, {"queue": "q", "priority": -2}, {"pending": True}, {"meta": {"trace_id": "t-2"}}],
)
def test_enqueue_many__events_of_a_uniform_batch(
    receiver, options, django_capture_on_commit_callbacks
):
    """Jobs that differ only in their args: their events as any other batch's."""
    batch = [{"type": "a.b", "args": [i], **options} for i in range(4)]
    with (
        emitted("data", connect=receiver) as received,
        django_capture_on_commit_callbacks(execute=True),
    ):
        jobs = django_ojs.enqueue_many(batch)
    state = "pending" if options.get("pending") else "available"
    expected = [
        {"job_id": str(job.id), "job_type": "a.b", "queue": options.get("queue", "default"),
         "state": state, "priority": options.get("priority", 0)} | options.get("meta", {})
        for job in jobs
    ]  # fmt: skip
    events = [Event.objects.get(job_id=job.id) for job in jobs]
    assert [e.wire_data for e in events] == expected
    assert {(e.type, e.source) for e in events} == {("job.enqueued", "ojs://django-ojs")}
    assert received == (expected if receiver else [])


@override_settings(OJS_MAX_ENVELOPE_BYTES=2_000)
def test_enqueue_many__names_the_plain_job_over_the_size_limit():
    """Jobs of a type and args only have their sizes checked together; the one too
    large is still the one the error names, and nothing is written."""
    batch = [{"type": "a.b", "args": ["x" * 300]} for _ in range(6)]  # 1,800 bytes together
    assert len(django_ojs.enqueue_many(batch)) == 6
    batch += [{"type": "a.b", "queue": "q", "args": []}, {"type": "a.b", "args": ["y" * 1_990]}]
    with pytest.raises(EnvelopeTooLarge) as info:
        django_ojs.enqueue_many(batch)
    assert info.value.details["index"] == 7
    assert info.value.message.startswith("jobs[7]: Job envelope is ")
    assert Job.objects.count() == 6


def test_enqueue_many__plain_items_make_the_rows_their_specs_would():
    """Jobs of a type and args only are made from one shared row: each is still the
    job ``enqueue`` makes, with containers of its own, in order among the others."""
    args = [1, "x"]
    items: list[dict[str, Any]] = [
        {"type": "a.b", "args": args},
        {"type": "c.d", "queue": "q", "priority": 2, "meta": {"k": "v"}},
        {"type": "e.f"},
    ]
    jobs = django_ojs.enqueue_many(items)
    assert [(j.type, j.queue, j.priority, j.args, j.meta) for j in jobs] == [
        ("a.b", "default", 0, [1, "x"], {}),
        ("c.d", "q", 2, [], {"k": "v"}),
        ("e.f", "default", 0, [], {}),
    ]
    single = django_ojs.enqueue("a.b", args)
    fields = [f.attname for f in Job._meta.concrete_fields if f.attname not in ("id",)]
    stamps = {"created_at", "enqueued_at"}
    assert {f: getattr(jobs[0], f) for f in fields if f not in stamps} == {
        f: getattr(single, f) for f in fields if f not in stamps
    }
    plain = [jobs[0], jobs[2]]
    for name in ("args", "meta", "tags", "errors", "extra"):
        assert getattr(plain[0], name) is not getattr(plain[1], name), name
    assert jobs[0].args is not args  # the caller's list stays the caller's
    assert [j.id for j in jobs] == sorted(j.id for j in jobs)
    assert [j.args for j in Job.objects.filter(id__in=[j.id for j in plain]).order_by("id")] == [
        [1, "x"],
        [],
    ]


@pytest.mark.parametrize("enabled", [True, False])
def test_enqueue_many__a_bulk_push_pauses_the_garbage_collector(enabled):
    """A push of many jobs writes them with Python's cyclic collector paused, and leaves
    it as it found it; a small push does not touch it."""
    seen: list[bool] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(gc.isenabled())
        return execute(sql, params, many, context)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with connection.execute_wrapper(record):
            django_ojs.enqueue_many([{"type": "a.b", "args": [i]} for i in range(2 * PUSH_BATCH)])
        assert seen and not any(seen)
        assert gc.isenabled() is enabled
        seen.clear()
        with connection.execute_wrapper(record):
            django_ojs.enqueue_many([{"type": "a.b", "args": [i]} for i in range(3)])
        assert seen and all(on is enabled for on in seen)
    finally:
        (gc.enable if was else gc.disable)()
    assert Job.objects.count() == 2 * PUSH_BATCH + 3


def test_enqueue_many__a_plain_item_is_validated_like_any_other():
    for item, field in [({"type": "Bad Type"}, "type"), ({"type": "a", "args": {}}, "args")]:
        with pytest.raises(ValidationError) as info:
            django_ojs.enqueue_many([{"type": "a"}, item])
        assert (info.value.details["index"], info.value.field) == (1, field)
    with pytest.raises(ValidationError) as info:
        django_ojs.enqueue_many([{"args": [1]}])
    assert info.value.message == "jobs[0]: type is required"
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"type": "a.b", "args": "no"}, ValidationError),
        ({"type": "a.b", "args": ["x" * 3_000]}, EnvelopeTooLarge),
        ({"type": "a.b", "queue": "q", "timeout": -1}, ValidationError),
        ({"type": "a.b", "meta": {"blob": "x" * 3_000}}, EnvelopeTooLarge),
    ],
)
@override_settings(OJS_MAX_ENVELOPE_BYTES=2_000)
def test_enqueue_many__an_item_found_bad_after_batches_were_sent_writes_nothing(bad, error):
    """Jobs without an id or a unique policy are validated one batch at a time, as the
    batches are sent: an item of a later batch that is refused rolls back what was
    sent, and only that."""
    index = 2 * PUSH_BATCH + 7  # in the third batch
    batch: list[dict[str, Any]] = [
        {"type": "a.b", "args": [i]} | ({"queue": "q", "priority": 3} if i % 3 else {})
        for i in range(3 * PUSH_BATCH)
    ]
    batch[index] = bad
    with transaction.atomic():
        Worker.objects.create(id="caller-row")  # the caller's own row, which survives
        with pytest.raises(error) as info:
            django_ojs.enqueue_many(batch)
    assert info.value.details["index"] == index
    assert info.value.message.startswith(f"jobs[{index}]: ")
    assert not Job.objects.exists() and not Event.objects.exists()
    assert Worker.objects.filter(id="caller-row").exists()
    del batch[index]
    jobs = django_ojs.enqueue_many(iter(batch))
    assert len(jobs) == Job.objects.count() == Event.objects.count() == len(batch)
    stored = dict(Job.objects.values_list("id", "queue"))
    assert [stored[job.id] for job in jobs] == [item.get("queue", "default") for item in batch]


def test_enqueue_many__with_ids_or_unique_policies_checks_the_whole_push_first():
    """Such items are not streamed: a duplicate is refused before anything is sent."""
    unique = {"keys": ["args"]}
    existing = django_ojs.enqueue("a.b", [1], unique=unique)
    batch = [{"type": "a.b", "args": [i]} for i in range(2, 2 * PUSH_BATCH)]
    for last in [
        {"type": "a.b", "id": existing.id},
        {"type": "a.b", "args": [1], "unique": unique},
    ]:
        with pytest.raises(DuplicateJob):
            django_ojs.enqueue_many([*batch, last])
        assert list(Job.objects.values_list("id", flat=True)) == [existing.id]


def test_job_ids_stay_on_the_clock_and_in_push_order_however_fast_jobs_come():
    """A job's UUIDv7 id is its creation time: a producer pushing more than one job a
    millisecond must not make ids ahead of the clock (FIFO across producers, time
    partitions), and its jobs sort in the order they were pushed."""
    before = time.time_ns() // 1_000_000
    pushed = []
    for i in range(300):
        pushed.append(django_ojs.enqueue("a.clock", [i]))
        if i % 100 == 0:
            pushed.extend(
                django_ojs.enqueue_many([{"type": "a.clock", "args": [i, j]} for j in range(200)])
            )
    after = time.time_ns() // 1_000_000
    made = [job.id for job in pushed]
    assert made == sorted(made) and len(set(made)) == len(made) == 900
    assert before <= made[0].int >> 80 and made[-1].int >> 80 <= after
    events = Event.objects.filter(job_id__in=made).values_list("id", flat=True)
    assert all(before <= event.int >> 80 <= after for event in events)


def test_enqueue_many__duplicate_ids_in_batch():
    job_id = uuid7()
    with pytest.raises(DuplicateJob):
        django_ojs.enqueue_many([{"type": "a", "id": job_id}, {"type": "b", "id": job_id}])
    assert not Job.objects.exists()


def test_enqueue_many__empty_is_a_no_op():
    assert django_ojs.enqueue_many([]) == []


# ------------------------------------------------------------------- transactions


def test_enqueue__rolled_back_transaction_leaves_no_job_and_no_event():
    with pytest.raises(RuntimeError), transaction.atomic():
        django_ojs.enqueue("a", ["x"])
        Worker.objects.create(id="caller-row")  # the caller's own row
        raise RuntimeError("rollback")
    assert not Job.objects.exists()
    assert not Event.objects.exists()
    assert not Worker.objects.exists()
    assert lifecycle.fetch(["default"]) == []


def test_enqueue__committed_job_is_fetchable_and_signal_fires_after_commit(
    django_capture_on_commit_callbacks,
):
    received = []

    def on_event(sender, event, **kwargs):
        received.append(event)

    signals.event_emitted.connect(on_event)
    try:
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            with transaction.atomic():
                job = django_ojs.enqueue("a", ["x"])
            assert received == []  # nothing is sent before commit
        for callback in callbacks:
            callback()
    finally:
        signals.event_emitted.disconnect(on_event)
    assert [e["type"] for e in received] == ["job.enqueued"]
    envelope = received[0]
    assert envelope["specversion"] == "1.0" and envelope["id"].startswith("evt_")
    assert envelope["subject"] == str(job.id)
    assert envelope["data"]["job_id"] == str(job.id)
    assert [j.id for j in lifecycle.fetch(["default"])] == [job.id]


def test_events__can_be_switched_off(settings, django_capture_on_commit_callbacks):
    settings.OJS_STORE_EVENTS = False
    received = []
    handler = lambda sender, event, **kw: received.append(event["type"])  # noqa: E731
    signals.event_emitted.connect(handler)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job = django_ojs.enqueue("a")
            lifecycle.ack(claim_one().id)
    finally:
        signals.event_emitted.disconnect(handler)
    assert not Event.objects.exists()
    assert received == ["job.enqueued", "job.started", "job.completed"]
    assert Job.objects.get(pk=job.pk).state == "completed"


# ---------------------------------------------------------------------------- fetch


def test_fetch__queue_order_then_priority_then_fifo():
    low = django_ojs.enqueue("a", ["low"], queue="q2", priority=-1)
    first = django_ojs.enqueue("a", ["first"], queue="q2", priority=1)
    second = django_ojs.enqueue("a", ["second"], queue="q2", priority=1)
    other = django_ojs.enqueue("a", ["q1"], queue="q1", priority=-50)
    got = lifecycle.fetch(["q1", "q2"], count=10, worker_id="w")
    assert [j.id for j in got] == [other.id, first.id, second.id, low.id]


def test_fetch__claims_at_most_count_and_sets_reservation():
    for i in range(5):
        django_ojs.enqueue("a", [i])
    before = timezone.now()
    got = lifecycle.fetch(["default"], count=3, worker_id="w9", visibility_timeout=7)
    assert len(got) == 3
    for job in got:
        stored = Job.objects.get(pk=job.pk)
        assert (stored.state, stored.attempt, stored.worker_id) == ("active", 1, "w9")
        assert stored.started_at >= before
        assert stored.visible_until == stored.started_at + timedelta(seconds=7)
    assert Job.objects.filter(state="available").count() == 2
    assert Worker.objects.filter(id="w9").exists()  # created on first contact


def test_fetch__visibility_from_job_then_setting(settings):
    settings.OJS_VISIBILITY_TIMEOUT = 11
    own = django_ojs.enqueue("a", visibility_timeout=3, priority=1)
    default = django_ojs.enqueue("a")
    got = {j.id: j for j in lifecycle.fetch(["default"], count=2)}
    assert got[own.id].visible_until - got[own.id].started_at == timedelta(seconds=3)
    assert got[default.id].visible_until - got[default.id].started_at == timedelta(seconds=11)


def test_fetch__timeout_and_stall_deadlines(settings):
    settings.OJS_GRACE_PERIOD = 2
    django_ojs.enqueue("a", timeout=5, heartbeat_timeout=9)
    job = claim_one()
    assert job.timeout_at - job.started_at == timedelta(seconds=7)
    assert job.stalled_at - job.started_at == timedelta(seconds=9)


def test_fetch__skips_paused_queues_and_resumes():
    django_ojs.enqueue("a", queue="paused-q")
    queues.pause("paused-q")
    assert lifecycle.fetch(["paused-q"]) == []
    django_ojs.enqueue("a", queue="paused-q")  # enqueue still accepted (digest §8.17)
    queues.resume("paused-q")
    assert len(lifecycle.fetch(["paused-q"], count=5)) == 2


def test_fetch__never_returns_expired_jobs():
    JobFactory(
        expires_at=timezone.now() - timedelta(seconds=1),
        stale_at=timezone.now() - timedelta(seconds=1),
    )
    assert lifecycle.fetch(["default"]) == []


def test_fetch__empty_queue_returns_empty_list():
    assert lifecycle.fetch(["nothing-here"], count=5) == []


@pytest.mark.parametrize(
    ("queues_arg", "count", "field"),
    [([], 1, "queues"), ("default", 1, "queues"), ([""], 1, "queues"), (["default"], 0, "count"),
     (["default"], 1001, "count"), (["default"], True, "count")],
)  # fmt: skip
def test_fetch__invalid_arguments(queues_arg, count, field):
    with pytest.raises(ValidationError) as info:
        lifecycle.fetch(queues_arg, count=count)
    assert info.value.field == field


def test_fetch__invalid_visibility_timeout():
    with pytest.raises(ValidationError):
        lifecycle.fetch(["default"], visibility_timeout=-1)


def test_prepared_fetch__claims_as_fetch_does_call_after_call(settings):
    """The worker's Fetch: made once, called for every fetch, same claims as fetch()."""
    settings.OJS_VISIBILITY_TIMEOUT = 13
    prepared = lifecycle.Fetch(["q1", "q2", "q1"], worker_id="w-prep", register=False)
    low = django_ojs.enqueue("a", ["low"], queue="q2", priority=-1)
    high = django_ojs.enqueue("a", ["high"], queue="q2", priority=1)
    other = django_ojs.enqueue("a", ["q1"], queue="q1", priority=-50)
    assert [j.id for j in prepared(2)] == [other.id, high.id]
    assert [j.id for j in prepared(2)] == [low.id]
    assert prepared(2) == []
    stored = Job.objects.get(pk=low.pk)
    assert (stored.state, stored.attempt, stored.worker_id) == ("active", 1, "w-prep")
    assert stored.visible_until - stored.started_at == timedelta(seconds=13)
    assert prepared.defaults.visibility_ms == 13_000
    assert not Worker.objects.filter(id="w-prep").exists()


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"queues": []}, "queues"), ({"queues": "default"}, "queues"),
     ({"queues": ["default"], "worker_id": ""}, "worker_id"),
     ({"queues": ["default"], "visibility_timeout": -1}, "visibility_timeout")],
)  # fmt: skip
def test_prepared_fetch__refuses_bad_arguments_when_made(arguments, field):
    with pytest.raises(ValidationError) as info:
        lifecycle.Fetch(**arguments)
    assert info.value.field == field


# ------------------------------------------------------------------------------ ack


@pytest.mark.parametrize("result", [None, {"ok": True}, ["a", 1], "text", 3.5, False])
def test_ack__completes_and_stores_any_json_result(result):
    django_ojs.enqueue("a")
    job = claim_one()
    done = lifecycle.ack(job.id, result, worker_id="w1")
    stored = Job.objects.get(pk=job.pk)
    assert (done.state, stored.state, stored.result) == ("completed", "completed", result)
    assert stored.completed_at is not None and stored.visible_until is None
    assert event_types(job) == ["job.enqueued", "job.started", "job.completed"]
    completed = Event.objects.get(job_id=job.id, type="job.completed")
    assert completed.data["attempt"] == 1 and completed.data["duration_ms"] >= 0


def test_ack__one_statement_and_locked_paths_agree(django_capture_on_commit_callbacks):
    """PostgreSQL completes in one statement unless a signal receiver needs the rows."""
    for _ in range(2):
        django_ojs.enqueue("a", [1], meta={"trace_id": "t-1"})
    fast_job = claim_one()
    fast = lifecycle.ack(fast_job.id, {"n": 1}, worker_id="w1")
    received = []
    handler = lambda sender, event, **kw: received.append(event)  # noqa: E731
    signals.event_emitted.connect(handler)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            locked_job = claim_one()
            locked = lifecycle.ack(locked_job.id, {"n": 1}, worker_id="w1")
    finally:
        signals.event_emitted.disconnect(handler)
    assert (fast.state, locked.state) == ("completed", "completed")
    for job in (fast, locked):
        stored = Job.objects.get(pk=job.pk)
        assert (stored.state, stored.result, stored.visible_until) == ("completed", {"n": 1}, None)
    data = [Event.objects.get(job_id=j.id, type="job.completed").wire_data for j in (fast, locked)]
    for d in data:
        d.pop("job_id"), d.pop("duration_ms")
    assert data[0] == data[1] == {
        "job_type": "a", "queue": "default", "state": "completed", "attempt": 1,
        "trace_id": "t-1", "result": {"n": 1},
    }  # fmt: skip
    assert [e["type"] for e in received][-1] == "job.completed"


def test_ack__clears_previous_error_but_keeps_history():
    django_ojs.enqueue("a", retry=NO_JITTER)
    lifecycle.fail(claim_one().id, "first")
    job = Job.objects.get()
    lifecycle.run_now(job.id)
    lifecycle.ack(claim_one().id)
    job.refresh_from_db()
    assert job.error is None and len(job.errors) == 1 and job.attempt == 2


def test_ack__unknown_job():
    with pytest.raises(JobNotFound) as info:
        lifecycle.ack(uuid7())
    assert info.value.http_status == 404
    with pytest.raises(JobNotFound):
        lifecycle.ack("not-a-uuid")


def test_ack__job_not_active_is_an_invalid_transition():
    job = django_ojs.enqueue("a")
    with pytest.raises(InvalidTransition) as info:
        lifecycle.ack(job.id)
    assert info.value.details["current_state"] == "available"
    assert info.value.code == "conflict" and info.value.http_status == 409


def test_ack__from_a_worker_that_does_not_hold_the_reservation():
    django_ojs.enqueue("a")
    job = claim_one(worker_id="owner")
    with pytest.raises(ReservationMismatch):
        lifecycle.ack(job.id, worker_id="intruder")
    assert Job.objects.get(pk=job.pk).state == "active"
    lifecycle.ack(job.id)  # no worker id: only the state is checked (digest §8.11)


def test_ack__result_must_be_json_native():
    django_ojs.enqueue("a")
    job = claim_one()
    with pytest.raises(ValidationError):
        lifecycle.ack(job.id, {"when": timezone.now()})
    assert Job.objects.get(pk=job.pk).state == "active"


def test_ack__twice_is_refused():
    django_ojs.enqueue("a")
    job = claim_one()
    lifecycle.ack(job.id)
    with pytest.raises(InvalidTransition) as info:
        lifecycle.ack(job.id)
    assert info.value.current_state == "completed"


# ----------------------------------------------------------------------------- fail


def test_fail__retryable_with_exact_backoff_then_discarded():
    django_ojs.enqueue("a", retry={**NO_JITTER, "max_attempts": 3})
    for attempt, delay in ((1, 1), (2, 2)):
        job = lifecycle.fail(
            claim_one().id, {"code": "boom", "message": f"try {attempt}"}, worker_id="w1"
        )
        assert job.state == "retryable"
        failed_at = Event.objects.filter(job_id=job.id, type="job.retrying").latest("seq").time
        assert job.next_attempt_at - failed_at == timedelta(seconds=delay)
        lifecycle.run_now(job.id)
    job = lifecycle.fail(claim_one().id, {"code": "boom", "message": "try 3"})
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "discarded" and stored.attempt == 3
    assert stored.discarded_at is not None and stored.completed_at is not None
    assert [e["message"] for e in stored.errors] == ["try 1", "try 2", "try 3"]
    assert [e["attempt"] for e in stored.errors] == [1, 2, 3]
    assert stored.error["message"] == "try 3"
    assert event_types(job).count("job.failed") == 3
    assert event_types(job)[-1] == "job.discarded"
    assert Job.objects.dead_letter().filter(pk=job.pk).exists()


def test_fail__non_retryable_error_prefix_match_discards_at_once():
    django_ojs.enqueue("a", retry={"max_attempts": 5, "non_retryable_errors": ["auth.*"]})
    job = lifecycle.fail(claim_one().id, {"type": "auth.expired", "message": "no"})
    assert job.state == "discarded" and job.attempt == 1


def test_fail__retryable_false_discards_at_once():
    django_ojs.enqueue("a", retry={"max_attempts": 5})
    assert (
        lifecycle.fail(claim_one().id, {"message": "no", "retryable": False}).state == "discarded"
    )


def test_fail__on_exhaustion_dead_letter_marks_the_job():
    django_ojs.enqueue("a", retry={"max_attempts": 1, "on_exhaustion": "dead_letter"})
    job = lifecycle.fail(claim_one().id, "x")
    assert (job.state, Job.objects.get(pk=job.pk).dead_letter) == ("discarded", True)


def test_fail__default_policy_comes_from_settings(settings):
    settings.OJS_RETRY_POLICY = {"max_attempts": 1}
    django_ojs.enqueue("a")
    assert lifecycle.fail(claim_one().id, "x").state == "discarded"


def test_fail__requeue_returns_to_available_without_backoff():
    django_ojs.enqueue("a")
    job = lifecycle.fail(claim_one().id, "x", requeue=True)
    assert job.state == "available"
    assert claim_one().attempt == 2


def test_fail__history_is_trimmed(settings):
    settings.OJS_ERROR_HISTORY_LIMIT = 2
    django_ojs.enqueue("a", retry={"max_attempts": 5})
    for _ in range(3):
        job = lifecycle.fail(claim_one().id, "x", requeue=True)
    assert [e["attempt"] for e in Job.objects.get(pk=job.pk).errors] == [2, 3]


def test_fail__total_timeout_prevents_a_retry_that_cannot_finish():
    django_ojs.enqueue("a", timeout=30, total_timeout=31, retry={**NO_JITTER, "max_attempts": 5})
    job = lifecycle.fail(claim_one().id, "x")
    assert job.state == "discarded"
    assert Event.objects.get(job_id=job.id, type="job.discarded").data["reason"] == "total_timeout"


def test_fail__invalid_error_and_wrong_state():
    job = django_ojs.enqueue("a")
    with pytest.raises(InvalidTransition):
        lifecycle.fail(job.id, "x")
    active = claim_one()
    with pytest.raises(ValidationError):
        lifecycle.fail(active.id, {"message": 5})
    with pytest.raises(ReservationMismatch):
        lifecycle.fail(active.id, "x", worker_id="someone-else")
    assert Job.objects.get(pk=active.pk).state == "active"


def test_fail__reported_timeout_emits_job_timeout():
    django_ojs.enqueue("a", retry={"max_attempts": 2})
    job = lifecycle.fail(claim_one().id, {"type": "timeout", "message": "too slow"})
    assert event_types(job)[-3:] == ["job.timeout", "job.failed", "job.retrying"]


def test_fail__events_carry_error_summary():
    django_ojs.enqueue("a", retry={"max_attempts": 2})
    job = lifecycle.fail(
        claim_one().id, {"code": "handler_error", "type": "ValueError", "message": "m"}
    )
    failed = Event.objects.get(job_id=job.id, type="job.failed").data
    retrying = Event.objects.get(job_id=job.id, type="job.retrying").data
    assert failed["error"] == {
        "code": "handler_error",
        "type": "ValueError",
        "message": "m",
        "retryable": True,
    }
    assert retrying["max_attempts"] == 2 and retrying["next_retry_at"]


# --------------------------------------------------------------------------- cancel


@pytest.mark.parametrize("trait", ["scheduled", "pending", "retryable", "active"])
def test_cancel__from_each_non_terminal_state(trait):
    job = JobFactory(**{trait: True})
    cancelled = lifecycle.cancel(job.id, reason="not needed", by="ops")
    stored = Job.objects.get(pk=job.pk)
    assert (cancelled.state, stored.state, cancelled.previous_state) == (
        "cancelled",
        "cancelled",
        trait,
    )
    assert stored.cancelled_at is not None
    data = Event.objects.get(job_id=job.id, type="job.cancelled").data
    assert (data["previous_state"], data["reason"], data["cancelled_by"]) == (
        trait,
        "not needed",
        "ops",
    )


def test_cancel__available_job_and_idempotent_repeat():
    job = django_ojs.enqueue("a")
    lifecycle.cancel(job.id)
    again = lifecycle.cancel(job.id)
    assert again.state == "cancelled"
    assert event_types(job).count("job.cancelled") == 1


@pytest.mark.parametrize("trait", ["completed", "discarded"])
def test_cancel__finished_job_is_refused(trait):
    job = JobFactory(**{trait: True})
    with pytest.raises(InvalidTransition) as info:
        lifecycle.cancel(job.id)
    assert info.value.current_state == trait


def test_cancel__active_job_refuses_late_ack_and_is_reported_in_heartbeat():
    django_ojs.enqueue("a")
    job = claim_one(worker_id="w1")
    lifecycle.cancel(job.id)
    with pytest.raises(InvalidTransition):
        lifecycle.ack(job.id, worker_id="w1")
    beat = lifecycle.beat("w1", active_job_ids=[str(job.id)])
    assert beat.cancelled_jobs == [str(job.id)] and beat.jobs_extended == []


def test_cancel__unknown_job():
    with pytest.raises(JobNotFound):
        lifecycle.cancel(uuid7())


# ------------------------------------------------------------- activate and friends


def test_activate__pending_to_available_or_scheduled():
    now_job = django_ojs.enqueue("a", pending=True)
    later_job = django_ojs.enqueue("a", pending=True, scheduled_at=timedelta(hours=1))
    assert lifecycle.activate(now_job.id).state == "available"
    assert lifecycle.activate(later_job.id).state == "scheduled"
    with pytest.raises(InvalidTransition):
        lifecycle.activate(now_job.id)


def test_retry_discarded__resets_attempt_and_keeps_history():
    job = JobFactory(discarded=True, dead_letter=True)
    retried = lifecycle.retry_discarded(job.id, override={"queue": "again", "meta": {"by": "ops"}})
    stored = Job.objects.get(pk=job.pk)
    assert (retried.state, stored.state, stored.attempt, stored.queue) == (
        "available",
        "available",
        0,
        "again",
    )
    assert stored.meta == {"by": "ops"} and len(stored.errors) == 1 and stored.error is None
    assert stored.discarded_at is None and not stored.dead_letter
    assert event_types(job) == ["dead_letter.retried", "job.enqueued"]
    assert claim_one("again").attempt == 1


@pytest.mark.parametrize("trait", ["completed", "cancelled", "active", "retryable"])
def test_retry_discarded__only_from_discarded(trait):
    job = JobFactory(**{trait: True})
    with pytest.raises(InvalidTransition):
        lifecycle.retry_discarded(job.id)


def test_retry_discarded__override_retry_policy_and_bad_override():
    job = JobFactory(discarded=True)
    lifecycle.retry_discarded(job.id, override={"retry": {"max_attempts": 9}})
    assert Job.objects.get(pk=job.pk).max_attempts == 9
    other = JobFactory(discarded=True)
    with pytest.raises(ValidationError):
        lifecycle.retry_discarded(other.id, override={"queue": "BAD"})
    assert Job.objects.get(pk=other.pk).state == "discarded"


def test_delete_discarded__only_dead_letter_jobs():
    dead = JobFactory(discarded=True)
    alive = JobFactory()
    lifecycle.delete_discarded(dead.id)
    assert not Job.objects.filter(pk=dead.pk).exists()
    with pytest.raises(JobNotFound):
        lifecycle.delete_discarded(alive.id)
    assert Event.objects.filter(type="dead_letter.deleted", job_id=dead.id).exists()


def test_discard__operator_ends_a_job_into_the_dead_letter():
    job = JobFactory(scheduled=True)
    lifecycle.discard(job.id, reason="bad data", by="ops")
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.dead_letter, stored.error["message"]) == (
        "discarded",
        True,
        "bad data",
    )
    with pytest.raises(InvalidTransition):
        lifecycle.discard(job.id)


def test_run_now__scheduled_or_retryable_become_available():
    scheduled = JobFactory(scheduled=True)
    retryable = JobFactory(retryable=True)
    assert lifecycle.run_now(scheduled.id).state == "available"
    assert lifecycle.run_now(retryable.id).state == "available"
    with pytest.raises(InvalidTransition):
        lifecycle.run_now(scheduled.id)


def test_purge__deletes_only_finished_jobs():
    finished = [JobFactory(completed=True), JobFactory(cancelled=True), JobFactory(discarded=True)]
    waiting = JobFactory()
    assert lifecycle.purge([j.id for j in [*finished, waiting]]) == 3
    assert list(Job.objects.values_list("id", flat=True)) == [waiting.id]


# --------------------------------------------------------------- workers and beats


def test_register_beat_deregister():
    worker = lifecycle.register("w1", hostname="h", pid=42, queues=["a", "b"], concurrency=4)
    assert (worker.hostname, worker.pid, worker.queues, worker.concurrency) == (
        "h",
        42,
        ["a", "b"],
        4,
    )
    beat = lifecycle.beat("w1", active_job_ids=[], state="running")
    assert (beat.state, beat.directive) == ("running", "")
    lifecycle.deregister("w1")
    assert not Worker.objects.filter(id="w1").exists()
    assert Event.objects.filter(type__in=["worker.started", "worker.stopped"]).count() == 2


def test_beat__extends_only_jobs_this_worker_holds():
    django_ojs.enqueue("a", visibility_timeout=5)
    django_ojs.enqueue("a")
    mine = claim_one(worker_id="w1")
    theirs = claim_one(worker_id="w2")
    first_deadline = Job.objects.get(pk=mine.pk).visible_until
    beat = lifecycle.beat(
        "w1", active_job_ids=[str(mine.id), str(theirs.id), "garbage"], visibility_timeout=60
    )
    assert beat.jobs_extended == [str(mine.id)]
    stored = Job.objects.get(pk=mine.pk)
    assert stored.visible_until > first_deadline + timedelta(seconds=50)
    assert stored.heartbeat_at >= beat.server_time - timedelta(seconds=1)
    assert Job.objects.get(pk=theirs.pk).visible_until < stored.visible_until
    assert Event.objects.filter(type="job.heartbeat", job_id=mine.id).exists()


def test_beat__costs_the_same_statements_for_one_job_or_many(django_assert_max_num_queries):
    # Each job's own timeouts are read with the others, not loaded one field at a time.
    django_ojs.enqueue_many([{"type": "a", "args": [i]} for i in range(12)])
    one = claim_one(worker_id="w1")
    many = lifecycle.fetch(["default"], 11, worker_id="w2")
    with CaptureQueriesContext(connection) as single:
        lifecycle.beat("w1", active_job_ids=[one.id])
    with django_assert_max_num_queries(len(single.captured_queries)):
        beat = lifecycle.beat("w2", active_job_ids=[j.id for j in many])
    assert len(beat.jobs_extended) == 11


def test_beat__job_visibility_used_when_request_has_none():
    django_ojs.enqueue("a", visibility_timeout=5, heartbeat_timeout=9)
    job = claim_one(worker_id="w1")
    beat = lifecycle.beat("w1", active_job_ids=[job.id])
    stored = Job.objects.get(pk=job.pk)
    assert stored.visible_until == beat.server_time + timedelta(seconds=5)
    assert stored.stalled_at == beat.server_time + timedelta(seconds=9)


def test_beat__unknown_worker_is_created_and_directives_are_delivered():
    assert lifecycle.beat("new-worker").state == "running"
    assert Worker.objects.filter(id="new-worker").exists()
    lifecycle.set_directive("new-worker", "quiet")
    beat = lifecycle.beat("new-worker")
    assert (beat.state, beat.directive) == ("quiet", "quiet")
    lifecycle.set_directive("new-worker", "terminate")
    assert lifecycle.beat("new-worker").state == "terminate"
    lifecycle.set_directive("new-worker", "running")
    assert lifecycle.beat("new-worker").directive == ""


def test_beat__invalid_input():
    with pytest.raises(ValidationError):
        lifecycle.beat("")
    with pytest.raises(ValidationError):
        lifecycle.beat("w", state="sleeping")
    with pytest.raises(ValidationError):
        lifecycle.beat("w", active_job_ids="not-a-list")
    with pytest.raises(ValidationError):
        lifecycle.set_directive("w", "dance")


def test_set_directive__unknown_worker():
    from django_ojs.exceptions import WorkerNotFound

    with pytest.raises(WorkerNotFound):
        lifecycle.set_directive("ghost", "quiet")


# -------------------------------------------------------------------------- queues


def test_queues__list_includes_default_and_counts():
    django_ojs.enqueue("a", queue="mail")
    JobFactory(queue="mail", completed=True)
    listed = {q.name: q for q in queues.list_queues(with_counts=True)}
    assert {"default", "mail"} <= set(listed)
    assert listed["mail"].counts["available"] == 1 and listed["mail"].counts["completed"] == 1
    assert queues.counts("mail")["available"] == 1


def test_queues__pause_resume_are_idempotent_and_emit_events():
    queues.pause("q", by="ops")
    queues.pause("q")
    assert Queue.objects.get(name="q").paused
    queues.resume("q")
    assert not Queue.objects.get(name="q").paused
    assert list(Event.objects.values_list("type", flat=True)) == ["queue.paused", "queue.resumed"]
    assert [e.data["queue"] for e in Event.objects.all()] == ["q", "q"]  # events §4.5
    with pytest.raises(ValidationError):
        queues.pause("Not Valid")


def test_job_to_wire__round_trip_of_an_enqueued_job():
    job = django_ojs.enqueue("a", [1], meta={"trace_id": "t"}, extra={"x_custom": True})
    out = Job.objects.get(pk=job.pk).to_wire()
    assert out["x_custom"] is True and out["meta"] == {"trace_id": "t"}
    assert out["state"] == "available" and out["id"] == str(job.id)
    started = Event.objects.filter(job_id=job.id).first().data
    assert started["trace_id"] == "t"  # events §8.3


def test_fetch__register_false_claims_without_writing_the_worker_row():
    """The in-process worker registers at start and heartbeats; its fetches skip the upsert."""
    django_ojs.enqueue("a", [1])
    django_ojs.enqueue("a", [2])
    (got,) = lifecycle.fetch(["default"], worker_id="w-quiet", register=False)
    assert Job.objects.get(pk=got.pk).worker_id == "w-quiet"
    assert not Worker.objects.filter(id="w-quiet").exists()
    old = timezone.now() - timedelta(minutes=5)
    Worker.objects.create(id="w-loud", queues=["default"], last_heartbeat_at=old)
    lifecycle.fetch(["default"], worker_id="w-loud")
    assert Worker.objects.get(id="w-loud").last_heartbeat_at > old  # refreshed by default
