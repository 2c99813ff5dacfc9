"""The optional time-partitioned layout of ojs_job and ojs_event (PostgreSQL).

Each test turns the tables into partitioned ones inside its own transaction, which
PostgreSQL rolls back with the DDL: the next test finds the plain tables again.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.drivers import get_driver
from django_ojs.drivers.periods import period_start
from django_ojs.ids import uuid7_at, uuid7_floor
from django_ojs.lifecycle import partitions
from django_ojs.models import Event, Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def made(now: datetime, days: int, **kwargs: object) -> Job:
    """A job created ``days`` before ``now``, with the UUIDv7 id of that moment."""
    at = now - timedelta(days=days)
    job: Job = JobFactory(id=uuid7_at(at), created_at=at, **kwargs)
    return job


def where(job_id: uuid.UUID) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM ojs_job WHERE id = %s", [job_id])
        return str(cursor.fetchone()[0])


def names(sql: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {row[0] for row in cursor.fetchall()}


INDEXES = "SELECT indexname FROM pg_indexes WHERE tablename = '{}'"
CONSTRAINTS = "SELECT conname FROM pg_constraint WHERE conrelid = '{}'::regclass"


@pytest.mark.postgresql
def test_enabling_keeps_every_row_index_and_constraint() -> None:
    old = django_ojs.enqueue("test.echo", ["before"])
    events_before = Event.objects.count()
    last_seq = Event.objects.order_by("-seq").values_list("seq", flat=True).first()
    indexes = {t: names(INDEXES.format(t)) for t in ("ojs_job", "ojs_event")}
    constraints = {t: names(CONSTRAINTS.format(t)) for t in ("ojs_job", "ojs_event")}

    done = lifecycle.partition_tables(["jobs", "events"], interval="day", premake=2)

    today = period_start(timezone.now(), "day")
    for name, table in (("jobs", "ojs_job"), ("events", "ojs_event")):
        layout = done[name]
        assert layout.interval == "day" and layout.default is not None
        starts = [p.start for p in layout.ranges]
        assert starts[-3:] == [today + timedelta(days=d) for d in range(3)]
        assert names(INDEXES.format(table)) == indexes[table]
        assert names(CONSTRAINTS.format(table)) == constraints[table]
        assert lifecycle.partition_layout(name) == layout
    assert Job.objects.get(pk=old.pk).args == ["before"]
    assert Event.objects.count() == events_before
    assert where(old.pk) == f"ojs_job_p{today:%Y%m%d}"
    new = django_ojs.enqueue("test.echo", ["after"])
    assert Event.objects.filter(job_id=new.pk).get().seq > last_seq
    # Enabling again changes nothing.
    assert lifecycle.partition_tables(["jobs"], interval="week", premake=2)["jobs"] == done["jobs"]


@pytest.mark.postgresql
def test_the_lifecycle_runs_on_partitioned_tables() -> None:
    lifecycle.partition_tables(["jobs", "events"], interval="week", premake=1)
    jobs = django_ojs.enqueue_many([{"type": "test.echo", "args": [i]} for i in range(3)])
    claimed = lifecycle.fetch(["default"], count=3, worker_id="w-1")
    assert {j.pk for j in claimed} == {j.pk for j in jobs}
    lifecycle.ack(claimed[0].pk, result={"ok": True})
    lifecycle.fail(claimed[1].pk, error={"type": "Boom", "message": "no"})
    lifecycle.cancel(claimed[2].pk)
    states = dict(Job.objects.values_list("id", "state"))
    assert sorted(states.values()) == ["cancelled", "completed", "retryable"]
    kinds = set(Event.objects.values_list("type", flat=True))
    assert {"job.enqueued", "job.started", "job.completed", "job.cancelled"} <= kinds
    week = period_start(timezone.now(), "week")
    assert {where(j.pk) for j in jobs} == {f"ojs_job_p{week:%Y%m%d}"}


@pytest.mark.postgresql
def test_a_row_outside_every_period_waits_in_the_default_partition_then_moves() -> None:
    lifecycle.partition_tables(["jobs"], interval="day", premake=0)
    later = timezone.now() + timedelta(days=3)
    job = django_ojs.enqueue("test.echo", ["far"], id=str(uuid7_at(later)))
    assert where(job.pk) == "ojs_job_default"

    done = lifecycle.maintain_partitions(premake=3)

    assert done["created"] == 3
    assert where(job.pk) == f"ojs_job_p{period_start(later, 'day'):%Y%m%d}"
    assert Job.objects.get(pk=job.pk).args == ["far"]


@pytest.mark.postgresql
def test_expired_event_periods_are_dropped_whole() -> None:
    now = timezone.now()
    old = [Event.objects.create(type="job.enqueued", source="t", time=now - timedelta(days=d))
           for d in (9, 8)]  # fmt: skip
    recent = Event.objects.create(type="job.enqueued", source="t", time=now - timedelta(days=1))
    lifecycle.partition_tables(["events"], interval="day", premake=1, now=now)

    done = lifecycle.maintain_partitions(premake=1, events_before=now - timedelta(days=7), now=now)

    assert done == {"created": 0, "dropped": 2}
    assert not Event.objects.filter(pk__in=[e.pk for e in old]).exists()
    assert Event.objects.filter(pk=recent.pk).exists()
    layout = lifecycle.partition_layout("events")
    assert layout is not None
    assert layout.ranges[0].start == period_start(now - timedelta(days=7), "day")


@pytest.mark.postgresql
def test_a_job_period_is_dropped_only_when_retention_lets_every_row_in_it_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partitions, "COMPACT_ROWS", 0)  # the rule alone, no compaction
    now = timezone.now()

    done_at = now - timedelta(days=8)
    gone = [made(now, 10, state="completed", completed_at=done_at) for _ in range(3)]
    gone.append(made(now, 10, state="cancelled", cancelled_at=done_at))
    # Each of these keeps its period: a job still to run, a result kept longer, a
    # discard inside its own (longer) retention.
    waiting = made(now, 9, state="scheduled", scheduled_at=now + timedelta(days=30))
    made(now, 9, state="completed", completed_at=done_at)
    result = made(now, 8, state="completed", completed_at=done_at, result_ttl=timedelta(days=30))
    discarded = made(now, 12, state="discarded", discarded_at=done_at)
    lifecycle.partition_tables(["jobs"], interval="day", premake=1, now=now)

    before = lifecycle.partition_layout("jobs")
    assert before is not None

    done = reaper.maintain_partitions(now=now)

    # Day -10 (every row expired) and day -11 (empty) go; days -12, -9 and -8 stay.
    assert done["dropped"] == 2
    assert not Job.objects.filter(pk__in=[j.pk for j in gone]).exists()
    assert Job.objects.filter(pk__in=[waiting.pk, result.pk, discarded.pk]).count() == 3
    after = lifecycle.partition_layout("jobs")
    assert after is not None
    dropped = {p.name for p in before.ranges} - {p.name for p in after.ranges}
    assert dropped == {f"ojs_job_p{now - timedelta(days=d):%Y%m%d}" for d in (10, 11)}
    # The period with a job still to run keeps it; the row prune takes its finished one.
    reaper.prune_expired()
    nine_days_ago = now - timedelta(days=9)
    assert list(Job.objects.filter(created_at=nine_days_ago)) == [waiting]


@pytest.mark.postgresql
def test_a_job_period_follows_the_own_retention_of_its_jobs_queues(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queue config §6.3: a queue that keeps its jobs longer keeps their period; one that
    keeps them shorter lets a period go before the global retention would."""
    monkeypatch.setattr(partitions, "COMPACT_ROWS", 0)
    now = timezone.now()
    lifecycle.set_queue_retention("long", {"completed": "P30D"})
    lifecycle.set_queue_retention("short", {"completed": "P1D"})
    # Completed 8 days ago: past the global 7 days.
    kept = made(now, 10, queue="long", state="completed", completed_at=now - timedelta(days=8))
    made(now, 10, queue="other", state="completed", completed_at=now - timedelta(days=8))
    # Completed 2 days ago: inside the global 7 days, past the short queue's 1.
    early = [made(now, 3, queue="short", state="completed", completed_at=now - timedelta(days=2))]
    lifecycle.partition_tables(["jobs"], interval="day", premake=1, now=now)

    reaper.maintain_partitions(now=now)

    assert where(kept.pk) == f"ojs_job_p{now - timedelta(days=10):%Y%m%d}"  # kept
    assert not Job.objects.filter(pk=early[0].pk).exists()  # day -3 dropped
    layout = lifecycle.partition_layout("jobs")
    assert layout is not None
    assert f"ojs_job_p{now - timedelta(days=3):%Y%m%d}" not in {p.name for p in layout.ranges}


@pytest.mark.postgresql
def test_an_expired_period_down_to_a_few_kept_rows_moves_them_to_the_default_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partitions, "COMPACT_ROWS", 2)
    now = timezone.now()

    done_at = now - timedelta(days=8)
    waiting = made(now, 9, state="scheduled", scheduled_at=now + timedelta(days=30))
    expired = made(now, 9, state="completed", completed_at=done_at)
    dead = made(now, 10, state="discarded", dead_letter=True, discarded_at=done_at)
    crowded = [made(now, 11, state="completed", completed_at=done_at) for _ in range(2)]
    crowded.append(made(now, 11, state="retryable", attempt=1, next_attempt_at=now))
    lifecycle.partition_tables(["jobs"], interval="day", premake=1, now=now)

    done = reaper.maintain_partitions(now=now)

    # Days -10 and -9 (at most 2 rows each) go, their kept jobs moved, and day -8
    # (empty); day -11 (3 rows, one kept) stays until the row prune brings it down to 2.
    assert done["dropped"] == 3
    assert where(waiting.pk) == where(dead.pk) == "ojs_job_default"
    assert not Job.objects.filter(pk=expired.pk).exists()
    assert Job.objects.get(pk=waiting.pk).scheduled_at == waiting.scheduled_at
    assert where(crowded[2].pk) == f"ojs_job_p{now - timedelta(days=11):%Y%m%d}"
    reaper.prune_expired()  # deletes the two expired rows of day -11
    assert reaper.maintain_partitions(now=now)["dropped"] == 1
    assert where(crowded[2].pk) == "ojs_job_default"
    assert not Job.objects.filter(pk__in=[j.pk for j in crowded[:2]]).exists()
    lifecycle.promote_due()
    claimed = lifecycle.fetch(["default"], count=5, worker_id="w-1")
    assert [j.pk for j in claimed] == [crowded[2].pk]  # a moved job is still worked on


@pytest.mark.postgresql
def test_the_reaper_prune_creates_periods_ahead() -> None:
    lifecycle.partition_tables(["jobs", "events"], interval="day", premake=0)

    out = reaper.prune_expired()

    assert out["partitions_created"] == 6  # OJS_PARTITION_PREMAKE = 3, for two tables
    layout = lifecycle.partition_layout("jobs")
    assert layout is not None and layout.ranges[-1].end == period_start(
        timezone.now(), "day"
    ) + timedelta(days=4)


@pytest.mark.postgresql
def test_the_command_shows_and_enables_the_layout() -> None:
    out = StringIO()
    call_command("ojs_partition", stdout=out)
    assert "jobs (ojs_job): not partitioned" in out.getvalue()

    out = StringIO()
    call_command(
        "ojs_partition", "--enable", "--interval", "month", "--tables", "events", stdout=out
    )

    text = out.getvalue()
    this_month = period_start(timezone.now(), "month")
    assert "events (ojs_event): by month" in text
    assert f"ojs_event_p{this_month:%Y%m%d}: {this_month:%Y-%m-%d}" in text
    assert "ojs_event_default" in text
    out = StringIO()
    call_command("ojs_partition", "--maintain", "--tables", "events", stdout=out)
    assert "created 0, dropped 0" in out.getvalue()


def test_the_command_refuses_unknown_tables() -> None:
    with pytest.raises(CommandError, match="jobs and/or events"):
        call_command("ojs_partition", "--tables", "workers")


@pytest.mark.sqlite
def test_sqlite_has_no_partitioned_layout() -> None:
    assert lifecycle.partition_layout("jobs") is None
    assert lifecycle.maintain_partitions(premake=3) == {"created": 0, "dropped": 0}
    with pytest.raises(CommandError, match="needs PostgreSQL"):
        call_command("ojs_partition", "--enable")


def test_periods_and_id_bounds() -> None:
    moment = datetime(2026, 11, 25, 15, 30, tzinfo=UTC)
    assert period_start(moment, "day") == datetime(2026, 11, 25, tzinfo=UTC)
    assert period_start(moment, "week") == datetime(2026, 11, 23, tzinfo=UTC)  # a Monday
    assert period_start(moment, "month") == datetime(2026, 11, 1, tzinfo=UTC)
    job_id = uuid7_at(moment)
    assert job_id.version == 7
    assert uuid7_floor(moment) <= job_id < uuid7_floor(moment + timedelta(milliseconds=1))


def definitions(table: str) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass",
            [table],
        )
        found = set(cursor.fetchall())
        # Index names only: PostgreSQL may print a predicate copied from a partitioned
        # index with its casts spelled another way (ojs_job_stale_idx), same meaning.
        cursor.execute("SELECT indexname, '' FROM pg_indexes WHERE tablename = %s", [table])
        return found | set(cursor.fetchall())


@pytest.mark.postgresql
def test_disabling_gives_back_the_tables_of_the_migrations() -> None:
    job = django_ojs.enqueue("test.echo", ["kept"])
    original = {t: definitions(t) for t in ("ojs_job", "ojs_event")}
    lifecycle.partition_tables(["jobs", "events"], interval="day", premake=1)
    django_ojs.enqueue("test.echo", ["partitioned"])

    call_command("ojs_partition", "--disable", stdout=StringIO())

    assert lifecycle.partition_layout("jobs") is None
    assert lifecycle.partition_layout("events") is None
    assert {t: definitions(t) for t in ("ojs_job", "ojs_event")} == original
    assert sorted(a[0] for a in Job.objects.values_list("args", flat=True)) == [
        "kept",
        "partitioned",
    ]
    later = django_ojs.enqueue("test.echo", ["plain"])
    assert Job.objects.get(pk=job.pk).state == "available"
    assert Event.objects.filter(job_id=later.pk).get().seq == Event.objects.order_by("-seq")[0].seq


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_a_drop_gives_way_to_a_busy_table_and_happens_at_a_later_pass() -> None:
    now = timezone.now()
    old = Event.objects.create(type="job.enqueued", source="t", time=now - timedelta(days=9))
    lifecycle.partition_tables(["events"], interval="day", premake=1, now=now)
    cutoff = now - timedelta(days=7)
    reading, release = threading.Event(), threading.Event()

    def long_reader() -> None:  # a transaction that read the table and is still open
        try:
            with transaction.atomic():
                assert Event.objects.count() >= 1
                reading.set()
                release.wait(30)
        finally:
            connection.close()

    reader = threading.Thread(target=long_reader)
    reader.start()
    try:
        assert reading.wait(30)
        busy = lifecycle.maintain_partitions(premake=1, events_before=cutoff, now=now)
        assert busy == {"created": 0, "dropped": 0}  # gave up on the lock, changed nothing
        assert Event.objects.filter(pk=old.pk).exists()
        pushed = django_ojs.enqueue("test.echo", [1])  # the table works on meanwhile
        assert Event.objects.filter(job_id=pushed.pk).exists()
        release.set()
        reader.join(30)
        done = lifecycle.maintain_partitions(premake=1, events_before=cutoff, now=now)
        assert done["dropped"] == 2  # days -9 and -8
        assert not Event.objects.filter(pk=old.pk).exists()
    finally:
        release.set()
        reader.join(30)
        lifecycle.unpartition_tables(["events"])
    assert lifecycle.partition_layout("events") is None


@pytest.mark.postgresql
def test_two_reapers_with_the_same_view_of_the_periods_do_not_fail() -> None:
    """Every worker runs a reaper: one may create or drop a period another saw first."""
    driver = get_driver(connection.alias)
    now = timezone.now()
    layout = lifecycle.partition_tables(["events"], interval="day", premake=0, now=now)["events"]
    start = period_start(now, "day") + timedelta(days=1)
    end = start + timedelta(days=1)

    first = driver.add_partition("ojs_event", start, end, timeout=1)
    again = driver.add_partition("ojs_event", start, end, timeout=1)

    assert first == again and first is not None
    today = layout.ranges[-1]
    assert driver.drop_partition(today, unless=None, keep=None, timeout=1) is True
    assert driver.drop_partition(today, unless=None, keep=None, timeout=1) is False
    found = lifecycle.partition_layout("events")
    assert found is not None and [p.name for p in found.ranges] == [first.name]


NO_STATISTICS = r"""
SELECT c.relname, a.attname FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
WHERE c.relname ~ '^ojs_(job|event)(_p\d{8}|_default)?$' AND a.attnum > 0
  AND a.attstattarget = 0
"""


def left_out() -> dict[str, set[str]]:
    """Each job or event table's (or partition's) columns that ANALYZE leaves out."""
    out: dict[str, set[str]] = {}
    with connection.cursor() as cursor:
        cursor.execute(NO_STATISTICS)
        for table, column in cursor.fetchall():
            out.setdefault(table, set()).add(column)
    return out


@pytest.mark.postgresql
def test_analyze_leaves_the_documents_out_on_every_layout() -> None:
    """Migration 0002_postgresql: no statistics of a job's JSON documents or an event's data,
    subject and source; partitions, made at once or later, and the plain table made
    back from them keep it so (neither LIKE nor PARTITION OF copies the targets)."""
    plain = left_out()
    assert {"args", "meta", "result", "errors", "last_progress"} <= plain["ojs_job"]
    assert not {"state", "queue", "type", "completed_at"} & plain["ojs_job"]
    assert plain["ojs_event"] == {"data", "subject", "source"}
    django_ojs.enqueue_many([{"type": "stats.job", "args": [i]} for i in range(20)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
        cursor.execute("SELECT attname FROM pg_stats WHERE tablename = 'ojs_job'")
        analysed = {row[0] for row in cursor.fetchall()}
    assert "state" in analysed and "args" not in analysed and "meta" not in analysed

    lifecycle.partition_tables(["jobs", "events"], interval="day", premake=1)
    lifecycle.maintain_partitions(premake=3)  # periods made later, one by one
    partitioned = left_out()
    assert len([t for t in partitioned if t.startswith("ojs_job_")]) >= 4
    for table, columns in partitioned.items():
        assert columns == plain["ojs_event" if table.startswith("ojs_event") else "ojs_job"]

    call_command("ojs_partition", "--disable", stdout=StringIO())
    assert left_out() == plain
