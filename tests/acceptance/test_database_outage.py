"""Workers that lose the database, and workers killed at random: real processes, PostgreSQL.

The connection losses are made with ``pg_terminate_backend`` on every other backend of the
test database: each worker connection (LISTEN, fetch, heartbeat, outcome writer, reaper)
ends as in a server restart, without touching the server other test runs share. The
workers must reconnect, log the outage, and finish every job; none may exit.

The chaos test ``kill -9``s random workers during a run of 2,000 jobs, starting a
replacement each time: no job may be lost, and a job may only run more than once if an
earlier start was by a worker that was killed.

Readiness is polled (registration, a heartbeat after the loss, new LISTEN connections),
with generous deadlines; no assertion depends on how fast anything runs.
"""

from __future__ import annotations

import random
import signal
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest
from django.db import connection
from django.utils import timezone

import django_ojs
from django_ojs.drivers.postgresql.statements import LISTEN_SQL
from django_ojs.models import Job, Worker
from tests.acceptance.conftest import Process, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.postgresql]

#: Short reservations: a job whose claim was cut off (or whose worker was killed) is
#: rescued by a reaper within seconds. Heartbeats (0.3 s) keep the others far from it.
TIMERS = {"OJS_VISIBILITY_TIMEOUT": 5}

# Every other backend of the test database: what a server restart does to the workers.
TERMINATE_SQL = """
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
"""
LISTENERS_SQL = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = %s
"""


def terminate_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(TERMINATE_SQL)
        return len(cursor.fetchall())


def listener_pids() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(LISTENERS_SQL, [LISTEN_SQL])
        return {pid for (pid,) in cursor.fetchall()}


def cut_connections(workers: list[Process]) -> None:
    """Terminate every worker connection, then wait until each worker is back: it beat
    again (supervisor) and LISTENs on a new connection (listener)."""
    before = listener_pids()
    assert len(before) >= len(workers)  # each worker listens
    since = timezone.now()
    assert terminate_backends() >= len(workers)

    def back() -> bool:
        beaten = Worker.objects.filter(
            pid__in=[w.pid for w in workers], last_heartbeat_at__gt=since
        ).count()
        return beaten == len(workers) and len(listener_pids() - before) >= len(workers)

    wait_for(back, lambda: workers, timeout=60)


def count(state: str) -> int:
    return Job.objects.filter(state=state).count()


def stop_cleanly(workers: list[Process]) -> None:
    for process in workers:
        process.signal(signal.SIGTERM)
    assert [process.wait(60) for process in workers] == [0] * len(workers)


def assert_outage_logged(process: Process) -> None:
    log = process.output()
    assert "database unavailable, retrying" in log
    assert "database available again" in log
    assert "Traceback" not in log


def test_idle_workers_survive_lost_connections_and_run_later_jobs(processes):
    workers = [processes.worker("--concurrency", "4", **TIMERS) for _ in range(2)]
    for _ in range(2):
        cut_connections(workers)
    jobs = django_ojs.enqueue_many([{"type": "test.noop"} for _ in range(200)])
    wait_for(lambda: count("completed") == len(jobs), lambda: workers, timeout=120)
    assert all(process.returncode is None for process in workers)
    for process in workers:
        assert_outage_logged(process)
    stop_cleanly(workers)


def test_busy_workers_survive_lost_connections_and_lose_no_job(processes):
    workers = [processes.worker("--concurrency", "10", **TIMERS) for _ in range(2)]
    # 500 jobs of 100 ms on 20 slots: at least 2.5 s of work, cut twice part-way.
    jobs = django_ojs.enqueue_many(
        [{"type": "test.slow", "args": [{"duration_ms": 100}]} for _ in range(500)]
    )
    for threshold in (100, 300):
        wait_for(lambda t=threshold: count("completed") >= t, lambda: workers, timeout=120)
        cut_connections(workers)
    wait_for(lambda: count("completed") == len(jobs), lambda: workers, timeout=180)
    assert set(Job.objects.values_list("state", flat=True)) == {"completed"}
    assert all(process.returncode is None for process in workers)
    for process in workers:
        assert_outage_logged(process)
    stop_cleanly(workers)


# --------------------------------------------------------------------------- chaos

JOBS = 2000
KILLS = 6


@pytest.fixture
def chaos_table() -> Iterator[None]:
    """The side table the ``chaos.record`` handler (example_project/jobs.py) writes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE ojs_chaos_start (id bigserial PRIMARY KEY, job_id text NOT NULL,"
            " attempt integer NOT NULL, pid integer NOT NULL)"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS ojs_chaos_start")


def starts() -> dict[str, list[tuple[int, int]]]:
    """Each job's recorded starts, as (attempt, pid), in order."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT job_id, attempt, pid FROM ojs_chaos_start ORDER BY id")
        by_job: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for job_id, attempt, pid in cursor.fetchall():
            by_job[job_id].append((attempt, pid))
    return by_job


def test_chaos_kill_9_random_workers_loses_no_job(processes, chaos_table):
    seed = random.randrange(2**32)
    print(f"chaos seed: {seed}")
    rng = random.Random(seed)
    start = time.monotonic()
    live = [processes.worker("--concurrency", "8", **TIMERS) for _ in range(3)]
    killed: set[int] = set()
    # 2,000 jobs of 150 ms on 24 slots: at least 12 s of work, so the kills (at each
    # further tenth of the jobs completed) all land while jobs are running.
    jobs = django_ojs.enqueue_many(
        [
            {"type": "chaos.record", "args": [150], "retry": {"max_attempts": 10}}
            for _ in range(JOBS)
        ]
    )
    for tenth in range(1, KILLS + 1):
        wait_for(lambda t=tenth: count("completed") >= JOBS * t // 10, lambda: live, 180)
        victim = live.pop(rng.randrange(len(live)))
        victim.popen.kill()  # SIGKILL: no clean-up at all
        victim.wait(30)
        killed.add(victim.pid)
        live.append(processes.worker("--concurrency", "8", **TIMERS))
    wait_for(lambda: count("completed") == JOBS, lambda: live, timeout=240)

    # Nothing lost: every job completed, and ran at least once.
    assert set(Job.objects.values_list("state", flat=True)) == {"completed"}
    recorded = starts()
    assert set(recorded) == {str(job.id) for job in jobs}
    # Every extra run is explained by a killed worker: of a job's n starts, at least
    # n - 1 were by workers that were then killed; and each start is its own attempt.
    unexplained = {
        job_id: runs
        for job_id, runs in recorded.items()
        if sum(pid in killed for _, pid in runs) < len(runs) - 1
    }
    assert not unexplained, f"runs not explained by a kill: {unexplained}"
    assert all(len({a for a, _ in runs}) == len(runs) for runs in recorded.values())
    extra = sum(len(runs) - 1 for runs in recorded.values())
    print(f"chaos: {len(killed)} kills, {extra} extra runs, {time.monotonic() - start:.1f}s")
    assert all(process.returncode is None for process in live)
    stop_cleanly(live)
