"""The reaper loop: leadership, scheduling of passes and pruning, resilience, commands.

What each pass does to jobs is tested with the lifecycle maintenance operations; the
timeouts end to end (real worker processes) are in ``tests/acceptance``.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections, transaction
from django.utils import timezone

from django_ojs import lifecycle, reaper
from django_ojs.drivers import get_driver
from django_ojs.lifecycle.maintenance import STATISTICS_MIN_PAGES
from django_ojs.models import Job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def ago(seconds: float):
    return timezone.now() - timedelta(seconds=seconds)


def run_in_thread(**options):
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: reaper.run(stop=stop, **options) or connections.close_all(), daemon=True
    )
    thread.start()
    return stop, thread


@pytest.mark.postgresql
def test_reaper__one_leader_at_a_time_on_postgresql():
    due = JobFactory(scheduled=True, scheduled_at=ago(1))
    holding = threading.Event()
    release = threading.Event()

    def other_reaper() -> None:
        try:
            with transaction.atomic():
                assert get_driver("default").try_lock(reaper.LOCK_NAME)
                holding.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_reaper)
    thread.start()
    assert holding.wait(10)
    try:
        result = reaper.run_once()
        assert not result.leader and result.moved == 0
        assert Job.objects.get(pk=due.pk).state == "scheduled"
    finally:
        release.set()
        thread.join(10)
    result = reaper.run_once()
    assert result.leader and result.promoted == 1


def test_reaper__loop_promotes_and_prunes_on_its_schedule(settings, wait_until):
    settings.OJS_RETENTION = {"completed": 3600}
    old = JobFactory(state="completed", completed_at=ago(7200))
    recent = JobFactory(state="completed", completed_at=ago(60))
    due = JobFactory(scheduled=True, scheduled_at=ago(1))
    stop, thread = run_in_thread(interval=0.05, prune_interval=0.2)
    try:
        wait_until(lambda: Job.objects.get(pk=due.pk).state == "available")
        wait_until(lambda: not Job.objects.filter(pk=old.pk).exists())
        assert Job.objects.filter(pk=recent.pk).exists()
        later = JobFactory(scheduled=True, scheduled_at=ago(0))
        wait_until(lambda: Job.objects.get(pk=later.pk).state == "available")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


def test_reaper__a_failing_pass_is_logged_and_the_loop_goes_on(monkeypatch, wait_until, caplog):
    calls = {"n": 0}
    real = lifecycle.promote_due

    def flaky(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database went away")
        return real(**kwargs)

    monkeypatch.setattr(lifecycle, "promote_due", flaky)
    due = JobFactory(scheduled=True, scheduled_at=ago(1))
    stop, thread = run_in_thread(interval=0.05, prune_interval=60)
    try:
        wait_until(lambda: Job.objects.get(pk=due.pk).state == "available")
    finally:
        stop.set()
        thread.join(10)
    assert calls["n"] >= 2
    assert "reaper pass failed" in caplog.text


def test_ojs_reaper_command__once_runs_one_pass_with_pruning():
    due = JobFactory(scheduled=True, scheduled_at=ago(1))
    out = StringIO()
    call_command("ojs_reaper", "--once", stdout=out)
    assert Job.objects.get(pk=due.pk).state == "available"
    assert "promoted=1" in out.getvalue() and "pruned=" in out.getvalue()


def test_worker__runs_the_reaper_unless_told_not_to(wait_until, settings):
    from django_ojs.worker import Worker

    settings.OJS_REAPER_INTERVAL = 0.05
    due = JobFactory(scheduled=True, scheduled_at=ago(1), type="nobody.handles")

    def run(worker):
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        return thread

    quiet = Worker(queues=["elsewhere"], run_reaper=False, poll_interval=0.05)
    thread = run(quiet)
    try:
        wait_until(lambda: quiet.listener is not None)
        assert not any(t.name == "ojs-reaper" for t in threading.enumerate())
        reaping = Worker(queues=["elsewhere"], poll_interval=0.05)
        other = run(reaping)
        try:
            wait_until(lambda: Job.objects.get(pk=due.pk).state == "available")
        finally:
            reaping.terminate()
            other.join(10)
    finally:
        quiet.terminate()
        thread.join(10)


def _changes_since_analysis() -> int:
    """ojs_job's count of changed rows since its last analysis, once this backend's
    counters reached the statistics system (waits for them, not for a clock)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = 'pg_stat_force_next_flush'")
        can_flush = cursor.fetchone()[0] == 1
        if can_flush:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = 'ojs_job'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def wait_for_live_rows(n: int) -> None:
    """Wait until ojs_job's count of live rows reads ``n`` (a reset reaches it
    asynchronously before PostgreSQL 15)."""
    pause = threading.Event()
    for _ in range(600):
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'ojs_job'")
            if cursor.fetchone()[0] == n:
                return
        pause.wait(0.1)
    pytest.fail(f"ojs_job's count of live rows never read {n}")


def wait_for_changes(n: int) -> None:
    pause = threading.Event()
    for _ in range(600):  # the counters arrive within a second or so; up to 60 s
        if _changes_since_analysis() >= n:
            return
        pause.wait(0.1)
    pytest.fail(f"PostgreSQL never counted the {n} inserted jobs")


@pytest.mark.postgresql
def test_a_pass_analyses_a_job_table_that_filled_up_since_its_last_analysis():
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")  # of the empty table: its changes count from 0
        # (an empty table's analysis keeps the column statistics it had: none, as new)
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'ojs_job'::regclass")
    lifecycle.enqueue_many([{"type": "stats.fill", "args": [i]} for i in range(1_500)])
    wait_for_changes(1_500)

    result = reaper.run_once()

    assert result.analyzed == ["ojs_job"]
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT most_common_vals::text FROM pg_stats "
                       "WHERE tablename = 'ojs_job' AND attname = 'state'")  # fmt: skip
        assert cursor.fetchone()[0] == "{available}"
    assert reaper.run_once().analyzed == []  # analysed once, then left to autovacuum


@pytest.mark.postgresql
def test_a_pass_analyses_a_table_filled_since_it_was_analysed_empty_before_its_rows_count():
    """The count of rows lags behind the inserts (a session reports them up to 10 s
    later): a table analysed empty is analysed by the size of its file, once."""
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")  # of the empty table: 0 pages
    lifecycle.enqueue_many([{"type": "stats.size", "args": [i]} for i in range(1_500)])
    # This backend's counts reach the statistics system first (none is left pending to
    # arrive later), then the table's are reset: as if the inserts were not counted
    # yet, so that only the file's size can tell.
    wait_for_changes(1_500)
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_stat_reset_single_table_counters('ojs_job'::regclass)")
    wait_for_live_rows(0)

    assert reaper.run_once().analyzed == ["ojs_job"]
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT relpages, reltuples FROM pg_class WHERE relname = 'ojs_job'")
        pages, rows = cursor.fetchone()
    assert pages >= STATISTICS_MIN_PAGES and rows == 1_500
    assert reaper.run_once().analyzed == []  # its pages are recorded: not again


@pytest.mark.postgresql
def test_a_pass_leaves_a_table_with_few_changes_to_autovacuum():
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
    lifecycle.enqueue_many([{"type": "stats.few", "args": [i]} for i in range(50)])
    wait_for_changes(50)
    assert reaper.run_once().analyzed == []


@pytest.mark.postgresql
def test_a_pass_leaves_a_drained_table_alone_and_analyses_it_once_it_doubled():
    """Claims and completions change no row count: a backlog drained after the table's
    analysis sets no analysis off, however many rows they changed."""
    lifecycle.enqueue_many([{"type": "stats.drain", "args": [i]} for i in range(1_500)])
    wait_for_changes(1_500)  # counted before the analysis, which starts the count anew
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")  # of the 1,500 waiting jobs
    while jobs := lifecycle.fetch(["default"], 500, worker_id="w-drain"):
        lifecycle.ack_many([(job.id, job.attempt, None) for job in jobs], worker_id="w-drain")
    wait_for_changes(3_000)  # 1,500 claims and 1,500 completions since the analysis
    assert Job.objects.filter(state="completed").count() == 1_500
    assert reaper.run_once().analyzed == []
    lifecycle.enqueue_many([{"type": "stats.more", "args": [i]} for i in range(1_500)])
    wait_for_changes(4_500)
    assert reaper.run_once().analyzed == ["ojs_job"]  # 3,000 rows: twice the 1,500


@pytest.mark.postgresql
def test_a_job_table_the_role_does_not_own_is_left_to_autovacuum():
    # ANALYZE by a role that does not own the table only warns and counts nothing: a
    # reaper that tried anyway would try again every pass.
    role = f"ojs_not_owner_{uuid.uuid4().hex[:8]}"
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
        cursor.execute(f"CREATE ROLE {role}")
    try:
        lifecycle.enqueue_many([{"type": "stats.other", "args": [i]} for i in range(1_500)])
        wait_for_changes(1_500)
        with connections["default"].cursor() as cursor:
            cursor.execute(f"SET ROLE {role}")
            try:
                assert lifecycle.refresh_statistics() == []
            finally:
                cursor.execute("RESET ROLE")
        assert lifecycle.refresh_statistics() == ["ojs_job"]  # the owner's is analysed
    finally:
        with connections["default"].cursor() as cursor:
            cursor.execute(f"DROP ROLE {role}")
