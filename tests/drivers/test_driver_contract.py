"""The engine contract: every ``Driver`` method, called directly, with the same tests.

This module runs against whichever database the run uses; CI runs the whole suite on
SQLite and on PostgreSQL, so each driver passes exactly these assertions (River's
``riverdrivertest``, Oban's ``for engine <- [Basic, Lite]``). The event payloads a driver
writes (in SQL or in Python) must equal ``job_data`` built in Python.
"""

from __future__ import annotations

import inspect
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from uuid6 import uuid7

import django_ojs
from django_ojs.drivers import (
    Completion,
    Driver,
    EventMode,
    EventRow,
    Written,
    enqueue_event,
    get_driver,
    job_data,
    job_rows,
)
from django_ojs.envelope import build
from django_ojs.lifecycle.rows import job_row
from django_ojs.models import Event, Job, Queue, Workflow
from django_ojs.policy import configured, default_retry_policy, effective, ms_delta
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

SOURCE = "ojs://driver-suite"


@pytest.fixture
def driver() -> Driver:
    return get_driver("default")


def claim(driver, queue="default", limit=10, *, events=EventMode.STORE, fields=None, **kw):
    params = {"worker_id": "w-1", "now": timezone.now(), "visibility_ms": None}
    params.update(kw)
    with transaction.atomic():
        return driver.claim(
            queue, limit, defaults=configured(), fields=fields, events=events, source=SOURCE,
            **params,
        )  # fmt: skip


def new_job(**options) -> Job:
    """An unsaved job row as ``push`` builds it (not inserted)."""
    spec = build(
        options.pop("type", "suite.job"),
        options.pop("args", [1]),
        max_bytes=1 << 20,
        retry_base=default_retry_policy(),
        **options,
    )
    return job_row(spec, timezone.now(), 3)


def stored_events(job_id) -> list[Event]:
    return list(Event.objects.filter(job_id=job_id).order_by("seq"))


def observed(mode: EventMode, returned: list[EventRow], stored: list[Event]) -> list[EventRow]:
    """The event rows to check for ``mode``, after checking where they went.

    Stored modes leave rows in ``ojs_event``; returning modes hand them back, equal to the
    stored ones when both. Returns the rows to inspect (empty for NONE).
    """
    if not mode.returned:
        assert returned == []
    if not mode.stored:
        assert stored == []
    if mode.returned and mode.stored:
        by_id = {e.id: e for e in stored}
        assert set(by_id) == {r.id for r in returned}
        for row in returned:
            event = by_id[row.id]
            assert (event.type, event.source, event.subject, event.job_id, event.queue, event.data) == (
                row.type, row.source, row.subject, row.job_id, row.queue, row.data,
            )  # fmt: skip
    if mode.returned:
        return returned
    return [
        EventRow(e.id, e.type, e.source, e.subject, e.time, e.job_id, e.queue, e.data)
        for e in stored
    ]


# ---------------------------------------------------------------- the contract itself


def test_every_operation_is_declared_abstract_and_implemented(driver):
    declared = {
        name
        for name, member in vars(Driver).items()
        if getattr(member, "__isabstractmethod__", False)
    }
    assert declared >= {
        "claim", "promote_due", "lock_rows", "update_if", "push_one", "push_many",
        "after_push", "complete_many", "insert_events", "lock_keys", "try_lock", "listener",
    }  # fmt: skip
    assert not getattr(type(driver), "__abstractmethods__", None)
    for name in declared:
        declared_params = inspect.signature(getattr(Driver, name)).parameters
        implemented = inspect.signature(getattr(type(driver), name)).parameters
        assert list(declared_params) == list(implemented), name


# ---------------------------------------------------------------- claim


def test_claim__orders_by_priority_then_fifo_and_respects_limit(driver):
    jobs = [django_ojs.enqueue("a", [i], priority=p) for i, p in enumerate([0, 5, 5, -5])]
    got = claim(driver, limit=3)
    assert isinstance(got, Written)
    assert [j.id for j in got.jobs] == [jobs[1].id, jobs[2].id, jobs[0].id]
    assert all(j.state == "active" and j.attempt == 1 and j.worker_id == "w-1" for j in got.jobs)
    assert Job.objects.get(pk=jobs[3].pk).state == "available"


def test_claim__sets_the_deadlines_policy_effective_resolves(driver):
    job = django_ojs.enqueue("a", timeout=3, grace_period=2, heartbeat_timeout=7)
    other = django_ojs.enqueue("a")
    now = timezone.now()
    got = claim(driver, now=now, visibility_ms=4000)
    by_id = {j.id: j for j in got.jobs}
    for pushed in (job, other):
        claimed = by_id[pushed.id]
        d = effective(pushed, visibility_ms=4000)
        assert claimed.started_at == now and claimed.heartbeat_at == now
        assert claimed.visible_until == now + ms_delta(d.visibility_ms)
        assert claimed.timeout_at == now + ms_delta(d.timeout_ms + d.grace_ms)
        assert claimed.stalled_at == now + ms_delta(d.heartbeat_timeout_ms)
    assert by_id[job.id].timeout_at == now + timedelta(seconds=5)


def test_claim__job_visibility_then_default(driver):
    own = django_ojs.enqueue("a", visibility_timeout=9)
    now = timezone.now()
    got = {j.id: j for j in claim(driver, now=now).jobs}
    assert got[own.id].visible_until == now + timedelta(seconds=9)


def test_claim__loads_every_field_or_only_those_asked(driver):
    django_ojs.enqueue("a", ["x"], meta={"k": [1, 2]}, timeout=3)
    django_ojs.enqueue("a", ["y"], meta={"k": [3]})
    full = claim(driver, limit=1).jobs[0]
    assert full.args == ["x"] and full.meta == {"k": [1, 2]} and full.timeout_ms == 3000
    part = claim(driver, limit=1, fields=("type", "args", "meta", "attempt")).jobs[0]
    assert part.args == ["y"] and part.meta == {"k": [3]} and part.attempt == 1


def test_claim__skips_paused_queues_and_stale_jobs(driver):
    django_ojs.enqueue("a", queue="paused")
    Queue.objects.filter(name="paused").update(paused=True)
    assert claim(driver, "paused").jobs == []
    stale = django_ojs.enqueue("a", queue="q2", enqueue_ttl=60)
    Job.objects.filter(pk=stale.pk).update(stale_at=timezone.now() - timedelta(seconds=1))
    assert claim(driver, "q2").jobs == []


def test_claim__keeps_only_expiry_and_deadline_in_stale_at(driver):
    job = django_ojs.enqueue("a", enqueue_ttl=60)
    (claimed,) = claim(driver).jobs
    assert claimed.id == job.id and claimed.stale_at is None


@pytest.mark.parametrize("mode", list(EventMode))
def test_claim__writes_and_returns_started_events_per_mode(driver, mode):
    job = django_ojs.enqueue("a", meta={"trace_id": "t-1"})
    Event.objects.all().delete()
    got = claim(driver, events=mode)
    (claimed,) = got.jobs
    rows = observed(mode, got.events, stored_events(job.id))
    if mode is EventMode.NONE:
        assert rows == []
        return
    (row,) = rows
    expected = job_data(claimed, worker_id="w-1", attempt=1)
    assert (row.type, row.source, row.subject, row.job_id, row.queue, row.data) == (
        "job.started", SOURCE, str(job.id), job.id, "default", expected,
    )  # fmt: skip
    assert expected["trace_id"] == "t-1" and expected["state"] == "active"


def test_claim__without_a_worker_writes_started_events_without_worker_id(driver):
    job = django_ojs.enqueue("a", meta={"trace_id": "t-2"})
    Event.objects.all().delete()
    (claimed,) = claim(driver, worker_id=None).jobs
    (row,) = stored_events(job.id)
    assert row.data == job_data(claimed, attempt=1)
    assert "worker_id" not in row.data and row.data["trace_id"] == "t-2"


# ---------------------------------------------------------------- promote, lock, update_if


def test_promote_due__moves_due_scheduled_and_retryable_jobs_only(driver):
    past = timezone.now() - timedelta(seconds=5)
    due_scheduled = JobFactory(state="scheduled", scheduled_at=past)
    due_retry = JobFactory(state="retryable", next_attempt_at=past, attempt=1)
    later = JobFactory(scheduled=True)
    other_queue = JobFactory(state="scheduled", scheduled_at=past, queue="elsewhere")
    now = timezone.now()
    with transaction.atomic():
        moved = driver.promote_due(now=now, queues=["default"], wait=False, limit=100)
    assert {j.id: j.previous_state for j in moved} == {
        due_scheduled.id: "scheduled", due_retry.id: "retryable",
    }  # fmt: skip
    assert all(j.state == "available" and j.enqueued_at == now for j in moved)
    states = dict(Job.objects.values_list("id", "state"))
    assert states[due_retry.id] == states[due_scheduled.id] == "available"
    assert states[later.id] == "scheduled" and states[other_queue.id] == "scheduled"
    assert Job.objects.get(pk=due_retry.pk).next_attempt_at is None


def test_look__never_misses_due_or_limited_jobs_and_is_exact_when_it_can_tell(driver):
    # The contract: "maybe" (True) is always allowed, a false "no" never is. A driver
    # that overrides look must also say no when there is nothing to do.
    exact = type(driver).look is not Driver.look
    past = timezone.now() - timedelta(seconds=5)

    def look():
        return driver.look(["default", "second"], timezone.now())

    JobFactory()  # a plain available job: the claim's business, not the look's
    JobFactory(scheduled=True)  # not due yet
    JobFactory(state="scheduled", scheduled_at=past, queue="elsewhere")
    JobFactory(state="available", queue="elsewhere", rate_key="k", rate_limit={"key": "k"})
    if exact:
        assert (look().due, look().limited) == (False, False)
    due = JobFactory(state="scheduled", scheduled_at=past, queue="second")
    assert look().due
    due.delete()
    retry = JobFactory(state="retryable", next_attempt_at=past, attempt=1)
    assert look().due
    retry.delete()
    if exact:
        assert not look().due
    limited = JobFactory(state="available", rate_key="k", rate_limit={"key": "k"})
    assert look().limited
    limited.delete()
    if exact:
        assert not look().limited
    Queue.objects.update_or_create(name="second", defaults={"limits": {"concurrency": 1}})
    assert look().limited


def test_claim_if_clear__claims_only_when_nothing_is_due_or_limited(driver):
    # "None" sends the fetch down its general path and is always allowed, but it claims
    # nothing; a driver that can look must claim when the queue is clear.
    exact = type(driver).look is not Driver.look
    past = timezone.now() - timedelta(seconds=5)

    def claim_clear():
        with transaction.atomic():
            return driver.claim_if_clear(
                "default", 10, worker_id="w-1", now=timezone.now(), visibility_ms=None,
                defaults=configured(), fields=None, events=EventMode.STORE, source=SOURCE,
            )  # fmt: skip

    if exact:
        assert claim_clear().jobs == []  # an empty queue: clear, nothing to claim
    JobFactory(state="scheduled", scheduled_at=past, queue="elsewhere")  # not this queue
    plain = JobFactory(priority=0)
    held = [
        lambda: JobFactory(state="scheduled", scheduled_at=past),
        lambda: JobFactory(state="retryable", next_attempt_at=past, attempt=1),
        lambda: JobFactory(state="available", rate_key="k", rate_limit={"key": "k"}),
    ]
    for make in held:
        job = make()
        assert claim_clear() is None
        job.delete()
    Queue.objects.update_or_create(name="default", defaults={"limits": {"concurrency": 1}})
    assert claim_clear() is None
    assert Job.objects.get(pk=plain.pk).state == "available"  # no None claimed anything
    Queue.objects.filter(name="default").update(limits=None)
    got = claim_clear()
    if exact:
        assert [j.id for j in got.jobs] == [plain.id]
        assert Job.objects.get(pk=plain.pk).state == "active"
    else:
        assert got is None


def test_promote_due__respects_the_limit(driver):
    past = timezone.now() - timedelta(seconds=5)
    JobFactory.create_batch(5, state="scheduled", scheduled_at=past)
    with transaction.atomic():
        moved = driver.promote_due(now=timezone.now(), queues=None, wait=True, limit=2)
    assert len(moved) == 2
    assert Job.objects.filter(state="available").count() == 2


def test_lock_rows__returns_the_ordered_limited_rows(driver):
    jobs = JobFactory.create_batch(4)
    with transaction.atomic():
        got = driver.lock_rows(Job.objects.order_by("-id"), limit=3, skip_locked=True)
    assert [j.id for j in got] == sorted((j.id for j in jobs), reverse=True)[:3]


def test_update_if__writes_only_on_the_expected_state_and_attempt(driver):
    job = JobFactory(active=True)
    assert not driver.update_if(job.id, state="available", attempt=1, fields={"priority": 9})
    assert not driver.update_if(job.id, state="active", attempt=2, fields={"priority": 9})
    assert driver.update_if(job.id, state="active", attempt=1, fields={"priority": 9})
    assert Job.objects.get(pk=job.pk).priority == 9
    assert not driver.update_if(uuid7(), state="active", attempt=1, fields={"priority": 1})


# ---------------------------------------------------------------- push


@pytest.mark.parametrize("mode", list(EventMode))
def test_push_one__inserts_the_job_its_event_and_its_queue_per_mode(driver, mode):
    later = timezone.now() + timedelta(hours=1)
    for job in (new_job(queue="fresh-q", meta={"trace_id": "abc"}, priority=2),
                new_job(queue="fresh-s", scheduled_at=later)):  # fmt: skip
        now = timezone.now()
        returned = driver.push_one(
            job, available=job.state == "available", now=now, events=mode, source=SOURCE
        )
        saved = Job.objects.get(pk=job.id)
        assert (saved.state, saved.args, saved.meta) == (job.state, [1], job.meta)
        assert Queue.objects.filter(name=job.queue).exists()
        rows = observed(mode, returned, stored_events(job.id))
        if mode is EventMode.NONE:
            assert rows == []
            continue
        (row,) = rows
        kind, _, data = enqueue_event(job)
        assert (row.type, row.source, row.subject, row.time) == (kind, SOURCE, str(job.id), now)
        assert (row.job_id, row.queue, row.data) == (job.id, job.queue, job_data(job, **data))
        assert row.id.version == 7
    assert Event.objects.filter(type="job.scheduled").count() == (1 if mode.stored else 0)


@pytest.mark.parametrize("mode", list(EventMode))
def test_push_many__inserts_jobs_and_enqueue_events_per_mode(driver, mode):
    later = timezone.now() + timedelta(hours=1)
    jobs = [
        new_job(queue="bulk-a", priority=3, meta={"trace_id": "t"}),
        new_job(queue="bulk-b", scheduled_at=later),
        new_job(queue="bulk-a", args=["z"]),
    ]
    now = timezone.now()
    with transaction.atomic():
        returned = driver.push_many([jobs], now=now, events=mode, source=SOURCE)
    assert Job.objects.filter(id__in=[j.id for j in jobs]).count() == 3
    assert set(Queue.objects.values_list("name", flat=True)) >= {"bulk-a", "bulk-b"}
    stored = list(Event.objects.filter(job_id__in=[j.id for j in jobs]).order_by("seq"))
    rows = observed(mode, returned, stored)
    if mode is EventMode.NONE:
        assert rows == []
        return
    if mode.returned:
        assert [r.job_id for r in rows] == [j.id for j in jobs]  # in push order
    rows = sorted(rows, key=lambda r: [j.id for j in jobs].index(r.job_id))
    for row, job in zip(rows, jobs, strict=True):
        kind, _, data = enqueue_event(job)
        assert (row.type, row.source, row.time, row.queue) == (kind, SOURCE, now, job.queue)
        assert row.data == job_data(job, **data)
    assert rows[1].type == "job.scheduled" and "priority" not in rows[1].data
    assert rows[0].data["trace_id"] == "t" and rows[0].data["priority"] == 3


def test_push_many__stores_every_field_as_push_one_does(driver):
    """A bulk push leaves out columns that are NULL in every row and formats each
    distinct timestamp once: the stored rows must still be what single pushes store."""
    later = timezone.now() + timedelta(hours=1)
    options = [
        {"queue": "rows-a", "priority": 3, "meta": {"trace_id": "t"}, "tags": ["x"]},
        {"queue": "rows-b", "scheduled_at": later, "expires_at": later + timedelta(days=1)},
        {"args": ["z", {"k": [1, None]}], "retry": {"max_attempts": 7}, "timeout": 2.5},
        {"total_timeout": 60, "enqueue_ttl": 30, "grace_period": 0, "result_ttl": 5},
    ]
    now = timezone.now()
    specs = [build("suite.job", o.pop("args", [1]), max_bytes=1 << 20, **o) for o in options]
    many = [job_row(spec, now, 3) for spec in specs]
    one = [job_row(spec, now, 3) for spec in specs]  # the same rows, with their own ids
    with transaction.atomic():
        driver.push_many([many], now=now, events=EventMode.NONE, source=SOURCE)
        for job in one:
            driver.push_one(job, available=False, now=now, events=EventMode.NONE, source=SOURCE)
    names = [f.attname for f in Job._meta.concrete_fields if f.attname != "id"]
    for a, b in zip(many, one, strict=True):
        stored_a = Job.objects.values(*names).get(pk=a.id)
        stored_b = Job.objects.values(*names).get(pk=b.id)
        assert stored_a == stored_b
        assert stored_a["created_at"] == now and stored_a["state"] == a.state
    assert many[1].state == "scheduled" and Job.objects.get(pk=many[1].id).scheduled_at == later


@pytest.mark.parametrize("mode", [EventMode.STORE, EventMode.STORE_RETURN])
def test_push_many__writes_batches_made_one_after_the_other(driver, mode):
    """Batches may come from a generator (a driver may send one before the next is
    made) and may differ in which columns they share: each is stored as a single push
    stores it, with its events, returned in push order across batches."""
    later = timezone.now() + timedelta(hours=1)
    batches = [
        [new_job(queue="lazy-a", args=[i]) for i in range(3)],
        [new_job(queue="lazy-b", scheduled_at=later, meta={"trace_id": "t"})],
        [new_job(queue="lazy-c", priority=i, tags=["x"] * i) for i in range(2)],
    ]
    made: list[int] = []

    def lazily():
        for index, batch in enumerate(batches):
            made.append(index)
            yield batch

    now = timezone.now()
    with transaction.atomic():
        returned = driver.push_many(lazily(), now=now, events=mode, source=SOURCE)
    jobs = [job for batch in batches for job in batch]
    assert made == [0, 1, 2]
    stored = {job.id: job for job in Job.objects.filter(id__in=[j.id for j in jobs])}
    assert len(stored) == 6
    for job in jobs:
        row = stored[job.id]
        assert (row.queue, row.args, row.priority, row.tags, row.state, row.meta) == (
            job.queue, job.args, job.priority, job.tags, job.state, job.meta
        )  # fmt: skip
    events = list(Event.objects.filter(job_id__in=stored).order_by("seq"))
    assert [e.job_id for e in events] == [j.id for j in jobs]
    assert events[3].type == "job.scheduled" and events[3].data["trace_id"] == "t"
    if mode.returned:
        assert [r.job_id for r in returned] == [j.id for j in jobs]
    assert set(Queue.objects.values_list("name", flat=True)) >= {"lazy-a", "lazy-b", "lazy-c"}


def test_push_many__an_error_while_a_later_batch_is_made_leaves_nothing(driver):
    """The first batch may be on its way when making the second fails: the error
    reaches the caller, the transaction keeps nothing, the connection works on."""

    def batches():
        yield [new_job(type="suite.half", args=[i]) for i in range(3)]
        raise RuntimeError("cannot make the next batch")

    with pytest.raises(RuntimeError, match="next batch"), transaction.atomic():
        driver.push_many(batches(), now=timezone.now(), events=EventMode.STORE, source=SOURCE)
    assert not Job.objects.filter(type="suite.half").exists()
    assert not Event.objects.filter(data__job_type="suite.half").exists()
    with transaction.atomic():
        driver.push_many(
            [[new_job(type="suite.half")]], now=timezone.now(), events=EventMode.STORE,
            source=SOURCE,
        )  # fmt: skip
    assert Job.objects.filter(type="suite.half").count() == 1


def test_push_many__keeps_json_values_python_finds_equal(driver):
    """1 == True == 1.0 in Python: a batch must still store each job's own JSON."""
    jobs = [new_job(args=[1], meta={"n": 1}), new_job(args=[True], meta={"n": True}),
            new_job(args=[1.0], meta={"n": 1.0})]  # fmt: skip
    with transaction.atomic():
        driver.push_many([jobs], now=timezone.now(), events=EventMode.NONE, source=SOURCE)
    stored = {j.id: (j.args, j.meta) for j in Job.objects.filter(id__in=[j.id for j in jobs])}
    for job, value in zip(jobs, [1, True, 1.0], strict=True):
        args, meta = stored[job.id]
        assert (args, meta) == ([value], {"n": value})
        assert (type(args[0]), type(meta["n"])) == (type(value), type(value))


def test_push_many__stores_each_jobs_own_varying_json(driver):
    """Varying JSON columns, with and without NULLs among them, keep each job's value."""
    values = [
        ([1, "é\u2028"], {"k": [None, {"x": 1.5}]}, None),
        ([{"nested": [[], {}]}], {"k": "v"}, {"max_attempts": 2}),
        ([], {"n": 10**20}, None),
    ]
    jobs = [new_job(args=a, meta=m, retry=r) for a, m, r in values]
    with transaction.atomic():
        driver.push_many([jobs], now=timezone.now(), events=EventMode.NONE, source=SOURCE)
    stored = {
        j.id: (j.args, j.meta, j.retry) for j in Job.objects.filter(id__in=[j.id for j in jobs])
    }
    assert [stored[job.id] for job in jobs] == [(j.args, j.meta, j.retry) for j in jobs]
    assert [(j.args, j.meta) for j in jobs] == [(a, m) for a, m, _ in values]
    assert [stored[job.id][2] is None for job in jobs] == [True, False, True]


@pytest.mark.django_db(transaction=True)
def test_push_many__opens_its_connection_when_none_is_open(driver):
    """Outside a transaction, on a thread whose connection is not open yet."""
    connection.close()
    driver.push_many(
        [[new_job(type="suite.fresh")]], now=timezone.now(), events=EventMode.STORE,
        source=SOURCE,
    )  # fmt: skip
    assert Job.objects.filter(type="suite.fresh").count() == 1
    assert Event.objects.filter(data__job_type="suite.fresh").count() == 1


def test_after_push__registers_queues_idempotently(driver):
    with transaction.atomic():
        driver.after_push({"one", "two"}, {"one"})
        driver.after_push({"one"}, {"one"})
    assert set(Queue.objects.values_list("name", flat=True)) == {"one", "two"}


# ---------------------------------------------------------------- complete


def complete(driver, items, *, worker_id="worker-1", events=EventMode.STORE, fields=None):
    return driver.complete_many(
        items, worker_id=worker_id, now=timezone.now(), events=events, source=SOURCE,
        fields=fields,
    )  # fmt: skip


@pytest.mark.parametrize("mode", list(EventMode))
def test_complete_many__completes_held_attempts_with_results_and_events(driver, mode):
    a = JobFactory(active=True, meta={"trace_id": "tr"})
    b = JobFactory(active=True)
    got = complete(
        driver, [Completion(a.id, 1, {"ok": [1, "x"]}), Completion(b.id, 1, None)], events=mode
    )
    assert {j.id for j in got.jobs} == {a.id, b.id}
    rows = {j.id: j for j in Job.objects.filter(id__in=[a.id, b.id])}
    assert rows[a.id].state == rows[b.id].state == "completed"
    assert rows[a.id].result == {"ok": [1, "x"]} and rows[b.id].result is None
    assert rows[a.id].visible_until is None and rows[a.id].timeout_at is None
    assert rows[a.id].completed_at is not None and rows[a.id].error is None
    stored = list(Event.objects.filter(job_id__in=[a.id, b.id]))
    written = observed(mode, got.events, stored)
    if mode is EventMode.NONE:
        assert written == []
        return
    events = {r.job_id: r for r in written}
    assert set(events) == {a.id, b.id}
    data = events[a.id].data
    assert data["result"] == {"ok": [1, "x"]} and data["trace_id"] == "tr"
    assert data["attempt"] == 1 and data["state"] == "completed"
    assert isinstance(data["duration_ms"], int) and data["duration_ms"] >= 0
    assert "result" not in events[b.id].data


def test_complete_many__skips_other_workers_other_attempts_and_inactive_jobs(driver):
    mine = JobFactory(active=True)
    theirs = JobFactory(active=True, worker_id="worker-2")
    old_attempt = JobFactory(active=True, attempt=2)
    done = JobFactory(state="completed")
    got = complete(
        driver,
        [Completion(j.id, 1, None) for j in (mine, theirs, old_attempt, done)]
        + [Completion(uuid.uuid4(), 1, None)],
        fields=("id",),
    )
    assert [j.id for j in got.jobs] == [mine.id]
    assert Job.objects.get(pk=theirs.pk).state == "active"
    assert Job.objects.get(pk=old_attempt.pk).state == "active"


def test_complete_many__without_worker_or_attempt_any_active_job_qualifies(driver):
    anonymous = JobFactory(active=True, worker_id=None, attempt=3)
    held = JobFactory(active=True, worker_id="someone")
    got = complete(
        driver, [Completion(anonymous.id, None, 5), Completion(held.id, None, 6)], worker_id=None
    )
    assert {j.id: j.result for j in got.jobs} == {anonymous.id: 5, held.id: 6}
    full = next(j for j in got.jobs if j.id == held.id)
    assert full.type == held.type and full.state == "completed"  # fields=None: all loaded


def test_complete_many__without_workflow_leaves_workflow_members_alone(driver):
    wf = Workflow.objects.create(kind="group", total=1)
    member = JobFactory(active=True, worker_id="worker-1", workflow=wf, workflow_step=0)
    plain = JobFactory(active=True, worker_id="worker-1")
    items = [Completion(member.id, 1, "m"), Completion(plain.id, 1, "p")]
    got = driver.complete_many(
        items, worker_id="worker-1", now=timezone.now(), events=EventMode.STORE, source=SOURCE,
        fields=("id",), without_workflow=True,
    )  # fmt: skip
    assert [j.id for j in got.jobs] == [plain.id]
    assert Job.objects.get(pk=member.id).state == "active"
    got = complete(driver, [Completion(member.id, 1, "m")])
    assert [j.id for j in got.jobs] == [member.id]
    assert got.jobs[0].workflow_id == wf.id  # fields=None: the workflow link is loaded


# ---------------------------------------------------------------- events, locks


def test_insert_events__stores_rows_as_given(driver):
    job = JobFactory()
    rows = job_rows([("job.custom", job, {"n": i}) for i in range(60)], SOURCE)  # COPY path
    rows += job_rows([("job.custom", job, {"n": 99})], SOURCE)  # INSERT path
    with transaction.atomic():
        driver.insert_events(rows[:60])
        driver.insert_events(rows[60:])
        driver.insert_events([])
    stored = stored_events(job.id)
    assert [(e.id, e.data) for e in stored] == [(r.id, r.data) for r in rows]


def test_insert_events__a_few_rows_with_and_without_a_job_keep_every_column(driver):
    """2 to 49 rows go in one statement of arrays on PostgreSQL: each column, a job id
    that is NULL, JSON with quotes, backslashes and non-ASCII text come back as given."""
    job = JobFactory()
    now = timezone.now()
    rows = job_rows([("job.custom", job, {"n": i, "s": 'é "q" \\ \n'}) for i in range(3)], SOURCE)
    rows += [
        EventRow(uuid7(), "queue.paused", SOURCE, f"q-{i}", now, None, f"q-{i}", {"queue": "q"})
        for i in range(2)
    ]
    with transaction.atomic():
        driver.insert_events(rows)
    stored = Event.objects.filter(id__in=[r.id for r in rows]).order_by("seq")
    assert [
        EventRow(e.id, e.type, e.source, e.subject, e.time, e.job_id, e.queue, e.data)
        for e in stored
    ] == rows


def test_try_lock__granted_when_free(driver):
    with transaction.atomic():
        assert driver.try_lock("some-lock")


@pytest.mark.postgresql  # SQLite: proven by tests/integration/test_unique_jobs.py's threads
@pytest.mark.django_db(transaction=True)
def test_lock_keys__excludes_other_transactions_until_commit(driver):
    import threading

    from django.db import connection, connections

    held, other_result = threading.Event(), []

    def other():
        held.wait(30)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_xact_lock(hashtextextended('k-1', 0))")
                other_result.append(cursor.fetchone()[0])
        finally:
            connections.close_all()

    thread = threading.Thread(target=other)
    thread.start()
    with transaction.atomic():
        driver.lock_keys(["k-2", "k-1", "k-1"])
        driver.lock_keys([])
        held.set()
        thread.join(30)
    assert other_result == [False]


def test_job_events_store_their_job_id_and_queue_once_and_send_them_in_the_envelope(driver):
    """A job event's ``job_id`` and ``queue`` are columns; its stored ``data`` does not
    repeat them (push of one, bulk push, claim, ACK), and the envelope has them."""
    one = django_ojs.enqueue("a", queue="q1", meta={"trace_id": "t-3"})
    many = django_ojs.enqueue_many([{"type": "b", "queue": "q1", "args": [i]} for i in range(3)])
    claim(driver, queue="q1", limit=10)
    complete(driver, [Completion(one.id, 1, {"ok": True})], worker_id="w-1")
    events = list(Event.objects.filter(job_id__in=[one.id, *(j.id for j in many)]))
    assert {e.type for e in events} == {"job.enqueued", "job.started", "job.completed"}
    for event in events:
        assert "job_id" not in event.data and "queue" not in event.data, event.type
        wire = event.to_wire()["data"]
        assert (wire["job_id"], wire["queue"]) == (str(event.job_id), "q1")
        assert {k: v for k, v in wire.items() if k not in ("job_id", "queue")} == event.data


def test_events_stored_with_their_job_id_and_queue_in_data_read_the_same():
    """Events stored before job events left them out of ``data`` keep their envelope."""
    job = django_ojs.enqueue("a", queue="q2")
    event = Event.objects.get(job_id=job.id)
    before = event.to_wire()
    Event.objects.filter(seq=event.seq).update(
        data={"job_id": str(job.id), "queue": "q2", **event.data}
    )
    event.refresh_from_db()
    assert event.to_wire() == before
