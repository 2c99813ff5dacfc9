"""Three real workers behind a real PgBouncer in transaction mode, then across its restart.

A private PgBouncer (its own ini in a temporary directory, ``pool_mode = transaction``, a
free port) in front of a private database on the suite's PostgreSQL server. The workers'
``default`` goes through the pooler with the settings the docs give for one
(``prepare_threshold: None``, ``DISABLE_SERVER_SIDE_CURSORS``); ``OJS_LISTEN_DATABASE``
names a ``direct`` alias, straight to PostgreSQL. Each job's handler (``chaos.mark``)
appends its start to a file, so a job run twice or never is seen whatever the database
says.

1. 5,000 jobs drain: none lost, none run twice, all on attempt 1; then single jobs pushed
   to idle workers give the pickup latency (reported, not asserted).
2. 5,000 more, and PgBouncer is killed and started again on the same port mid-drain: the
   same, with a 900 s reservation, so a claim whose reply was lost cannot wait it out
   within the test's deadline: such jobs come back through the workers' heartbeats
   (``job.released``).
3. A listener whose alias goes through the pooler is caught by its test notification.
4. Without ``OJS_LISTEN_DATABASE`` the workers poll, saying so once each (pickup reported).
5. The same drain straight to PostgreSQL, for comparison.

Runs in the PostgreSQL suite when ``pgbouncer`` is installed (``make pgbouncer-deps``
installs it); with ``CI=true`` a missing ``pgbouncer`` fails the test. Alone:
``make test-pgbouncer``. Figures are printed (``-s``) and go to the how-to's table.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from tests.acceptance.conftest import FAST_TIMERS, ROOT, Process, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgresql, pytest.mark.pgbouncer]

WORKERS = 3
JOBS = 5000
#: Long enough that a job waiting out its reservation would miss the test's deadlines.
VISIBILITY_TIMEOUT = 900
DRAIN_DEADLINE = 600
PICKUP_SAMPLES = 30


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if found is None:
        message = "pgbouncer is not installed (make pgbouncer-deps installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI=true needs the PgBouncer test")
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """Where the suite's PostgreSQL server is (the test database's host, port, user)."""

    def __init__(self) -> None:
        s = settings.DATABASES["default"]
        self.host = s.get("HOST") or "127.0.0.1"
        self.port = int(s.get("PORT") or 5432)
        self.user = s.get("USER") or "postgres"
        self.password = s.get("PASSWORD") or ""

    def url(self, dbname: str, port: int | None = None, host: str | None = None) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        return f"postgres://{auth}@{host or self.host}:{port or self.port}/{dbname}"

    def connect(self, dbname: str, **kwargs: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, password=self.password or None,
            dbname=dbname, autocommit=True, **kwargs,
        )  # fmt: skip


class PgBouncer:
    """A private PgBouncer in transaction mode, run in the foreground so it can be killed."""

    def __init__(self, root: Path, server: Server, dbname: str):
        self.binary = pgbouncer_binary()
        self.root = root
        self.port = free_port()
        self.ini = root / "pgbouncer.ini"
        self.log = root / "pgbouncer.log"
        (root / "users.txt").write_text(f'"{server.user}" "{server.password}"\n')
        self.ini.write_text(
            "[databases]\n"
            f"{dbname} = host={server.host} port={server.port} dbname={dbname}"
            + (f" password={server.password}" if server.password else "")
            + "\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {root / 'users.txt'}\n"
            "pool_mode = transaction\n"
            "default_pool_size = 20\n"
            "max_client_conn = 500\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.log}\n"
        )
        # PgBouncer refuses to run as root: then it runs as postgres (-u).
        self.as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
        if self.as_user:
            os.chmod(root, 0o777)
        self.popen: subprocess.Popen[bytes] | None = None
        self.dbname = dbname
        self.server = server

    def start(self) -> None:
        self.popen = subprocess.Popen(
            [self.binary, *self.as_user, str(self.ini)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        # Ready when a query through it answers.
        wait_for(self._answers, timeout=60)

    def _answers(self) -> bool:
        assert self.popen is not None
        if self.popen.poll() is not None:
            raise AssertionError(f"pgbouncer exited:\n{self.log_text()[-3000:]}")
        try:
            with psycopg.connect(
                host="127.0.0.1", port=self.port, user=self.server.user, dbname=self.dbname,
                autocommit=True, prepare_threshold=None, connect_timeout=2,
            ) as conn:  # fmt: skip
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=30)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Setup:
    def __init__(self, root: Path, server: Server, dbname: str, pooler: PgBouncer):
        self.root = root
        self.server = server
        self.dbname = dbname
        self.pooler = pooler
        self.pooled_url = server.url(dbname, port=pooler.port, host="127.0.0.1")
        self.direct_url = server.url(dbname)
        self.workers: list[Process] = []

    def env(self, **ojs: Any) -> dict[str, str]:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.acceptance.pgbouncer_settings",
            "DATABASE_URL": self.pooled_url,
            "DIRECT_DATABASE_URL": self.direct_url,
            "OJS_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
        env.update({name: json.dumps(value) for name, value in {**FAST_TIMERS, **ojs}.items()})
        return env

    def manage(self, code: str, **ojs: Any) -> str:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
            cwd=ROOT, env=self.env(**ojs), check=True, timeout=300, capture_output=True,
            text=True,
        ).stdout  # fmt: skip

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.server.connect(self.dbname) as conn:
            return conn.execute(sql, params).fetchall()

    def count(self, sql: str, params: Any = None) -> int:
        return int(self.query(sql, params)[0][0])


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[Setup]:
    pgbouncer_binary()
    server = Server()
    dbname = f"ojs_pgbouncer_{uuid.uuid4().hex[:8]}"
    root = Path(tempfile.mkdtemp(prefix="ojs-pgbouncer-"))
    with server.connect("postgres") as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    pooler = PgBouncer(root, server, dbname)
    try:
        pooler.start()
        setup = Setup(root, server, dbname, pooler)
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env={**setup.env(), "DATABASE_URL": setup.direct_url}, check=True,
            timeout=300,
        )  # fmt: skip
        env = setup.env(
            OJS_LISTEN_DATABASE="direct",
            OJS_VISIBILITY_TIMEOUT=VISIBILITY_TIMEOUT,
            OJS_WORKER_POLL_INTERVAL=1.0,  # the default: polling would show in the pickup
            OJS_WORKER_HEARTBEAT_INTERVAL=1.0,
        )
        logs = tmp_path_factory.mktemp("workers")
        setup.workers = [
            Process(["ojs_worker", "--concurrency", "10"], env, logs / f"worker-{i}.log")
            for i in range(WORKERS)
        ]
        wait_for(lambda: setup.count("SELECT count(*) FROM ojs_worker") == WORKERS,
                 setup.workers, timeout=120)  # fmt: skip
        yield setup
        for process in setup.workers:
            process.signal(signal.SIGTERM)
        assert [process.wait(60) for process in setup.workers] == [0] * WORKERS
    finally:
        for process in setup.workers:
            process.stop()
            print(f"--- worker (pid {process.pid}) ---\n{process.output()[-3000:]}")
        pooler.kill()
        print(f"--- pgbouncer ---\n{pooler.log_text()[-3000:]}")
        with server.connect("postgres") as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        shutil.rmtree(root, ignore_errors=True)


def push(setup: Setup, count: int, marks: Path) -> None:
    job = {"type": "chaos.mark", "args": [str(marks)]}
    setup.manage(f"import django_ojs; django_ojs.enqueue_many([{job!r}] * {count})")


def starts(marks: Path) -> list[tuple[str, int]]:
    if not marks.exists():
        return []
    out = []
    for line in marks.read_text().splitlines():
        job_id, attempt, _ = line.split()
        out.append((job_id, int(attempt)))
    return out


def check_drain(setup: Setup, marks: Path, expected: int, *, pooled_listen: bool = False) -> None:
    """Every job completed once, on attempt 1: none lost, none run twice.

    Unless a LISTEN went through the pooler on purpose (``pooled_listen``), none did.
    """
    ran = starts(marks)
    per_job = Counter(job_id for job_id, _ in ran)
    twice = {job_id: n for job_id, n in per_job.items() if n > 1}
    assert not twice, f"{len(twice)} jobs ran more than once: {list(twice.items())[:5]}"
    assert len(per_job) == expected
    assert {attempt for _, attempt in ran} == {1}
    assert setup.count("SELECT count(*) FROM ojs_job WHERE state <> 'completed'") == 0
    assert setup.query("SELECT DISTINCT attempt FROM ojs_job") == [(1,)]
    for process in setup.workers:
        assert process.returncode is None
        log = process.output()
        assert "cannot receive notifications" not in log  # LISTEN works on its alias
        assert "Traceback" not in log
    if not pooled_listen:
        # No LISTEN went through the pooler: it would log each NOTIFY it could not deliver.
        assert "not linked" not in setup.pooler.log_text()


def drain(setup: Setup, marks: Path, total: int) -> float:
    began = time.monotonic()
    wait_for(
        lambda: setup.count("SELECT count(*) FROM ojs_job WHERE state = 'completed'") == total,
        setup.workers,
        timeout=DRAIN_DEADLINE,
    )
    return time.monotonic() - began


def pickup_p50(setup: Setup, marks: Path) -> tuple[float, float]:
    """Push single jobs to idle workers through the pooler, one every 0.1 s; the p50 and
    max of their waits from push to claim (ms)."""
    setup.manage(
        "import time, django_ojs\n"
        f"for _ in range({PICKUP_SAMPLES}):\n"
        f"    django_ojs.enqueue('chaos.mark', [{str(marks)!r}])\n"
        "    time.sleep(0.1)\n"
    )
    wait_for(lambda: len(starts(marks)) == PICKUP_SAMPLES, setup.workers, timeout=120)
    ids = [job_id for job_id, _ in starts(marks)]
    delays = [
        float(row[0])
        for row in setup.query(
            "SELECT EXTRACT(EPOCH FROM started_at - enqueued_at) * 1000 FROM ojs_job "
            "WHERE id = ANY(%s::uuid[])",
            [ids],
        )
    ]
    assert len(delays) == PICKUP_SAMPLES
    return statistics.median(delays), max(delays)


def test_drain_and_pickup_behind_pgbouncer(setup, tmp_path):
    marks = tmp_path / "starts.txt"
    began = time.monotonic()
    push(setup, JOBS, marks)
    pushed = time.monotonic()
    drain(setup, marks, JOBS)
    seconds = time.monotonic() - pushed
    check_drain(setup, marks, JOBS)

    # Pickup: the workers are woken by NOTIFY on their direct LISTEN connections.
    p50, worst = pickup_p50(setup, tmp_path / "pickup.txt")

    # django_ojs.wait() through the pooler, listening on the direct alias.
    waited = setup.manage(
        "import django_ojs\n"
        f"job = django_ojs.enqueue('chaos.mark', [{str(tmp_path / 'waited.txt')!r}])\n"
        "print(django_ojs.wait(job.id, timeout=60).state)\n",
        OJS_LISTEN_DATABASE="direct",
    )
    assert waited.strip().splitlines()[-1] == "completed"
    print(
        f"\nPgBouncer (transaction mode), {WORKERS} workers: {JOBS} jobs drained in "
        f"{seconds:.1f}s ({JOBS / seconds:.0f} jobs/s; {pushed - began:.1f}s to push); "
        f"pickup p50 {p50:.1f} ms, max {worst:.1f} ms "
        f"({PICKUP_SAMPLES} single jobs, LISTEN on the direct alias)"
    )


def test_pgbouncer_restart_mid_drain(setup, tmp_path):
    marks = tmp_path / "starts.txt"
    before = setup.count("SELECT count(*) FROM ojs_job")
    push(setup, JOBS, marks)
    total = before + JOBS
    pushed = time.monotonic()
    # Mid-drain: a fifth of the new jobs done.
    wait_for(lambda: len(starts(marks)) >= JOBS // 5, setup.workers, timeout=DRAIN_DEADLINE)
    setup.pooler.kill()
    killed = time.monotonic()
    setup.pooler.start()  # the same port
    restarted = time.monotonic()
    drain(setup, marks, total)
    done = time.monotonic()
    released = setup.count("SELECT count(*) FROM ojs_event WHERE type = 'job.released'")
    stalled = setup.count("SELECT count(*) FROM ojs_event WHERE type = 'job.stalled'")
    check_drain(setup, marks, JOBS)
    assert stalled == 0  # no reservation ran out
    assert done - restarted < VISIBILITY_TIMEOUT
    print(
        f"\nPgBouncer killed and restarted mid-drain (down {restarted - killed:.1f}s): "
        f"{JOBS} jobs drained in {done - pushed:.1f}s, {done - restarted:.1f}s after the "
        f"restart; {released} claims whose replies were lost handed back by heartbeats"
    )
    with contextlib.suppress(Exception):
        print(f"pgbouncer log: {setup.pooler.log_text().count('not linked')} 'not linked' lines")


def test_listen_through_the_pooler_is_detected(setup, tmp_path):
    """A LISTEN alias that goes through the pooler but has none of a pooled alias's
    settings is caught by the test notification; one that looks pooled is not tried."""
    from django.db import connections

    from django_ojs.drivers.postgresql.listener import PostgreSQLListener

    base = {**connections["default"].settings_dict, "NAME": setup.dbname, "OPTIONS": {}}
    connections.settings["via_pooler"] = {**base, "HOST": "127.0.0.1", "PORT": setup.pooler.port}
    connections.settings["straight"] = {
        **base, "HOST": setup.server.host, "PORT": setup.server.port,
    }  # fmt: skip
    try:
        via_pooler = PostgreSQLListener("via_pooler", ["default"])
        straight = PostgreSQLListener("straight", ["default"])
        assert (via_pooler.polling, straight.polling) == (True, False)
        via_pooler.close()
        straight.close()
    finally:
        for name in ("via_pooler", "straight"):
            connections[name].close()
            del connections[name]
            del connections.settings[name]


def test_without_a_listen_alias_workers_poll_with_one_warning(setup, tmp_path):
    """What fails without OJS_LISTEN_DATABASE: nothing is lost, but workers poll."""
    for process in setup.workers:
        process.signal(signal.SIGTERM)
    assert [process.wait(60) for process in setup.workers] == [0] * WORKERS
    env = setup.env(OJS_WORKER_POLL_INTERVAL=1.0, OJS_WORKER_HEARTBEAT_INTERVAL=1.0)
    setup.workers = [
        Process(["ojs_worker", "--concurrency", "10"], env, tmp_path / f"worker-{i}.log")
        for i in range(WORKERS)
    ]
    wait_for(lambda: setup.count("SELECT count(*) FROM ojs_worker") == WORKERS,
             setup.workers, timeout=120)  # fmt: skip
    p50, worst = pickup_p50(setup, tmp_path / "pickup.txt")
    for process in setup.workers:
        # One line per worker, however long it runs: no reconnection loop.
        assert process.output().count("cannot receive notifications") == 1
    print(
        f"\nWithout OJS_LISTEN_DATABASE ({WORKERS} workers polling every 1 s): pickup p50 "
        f"{p50:.1f} ms, max {worst:.1f} ms"
    )


def test_the_same_drain_straight_to_postgresql(setup, tmp_path):
    """The baseline the pooler's figures compare with: the same workers and jobs, every
    connection straight to PostgreSQL."""
    for process in setup.workers:
        process.signal(signal.SIGTERM)
    assert [process.wait(60) for process in setup.workers] == [0] * WORKERS
    env = {
        **setup.env(OJS_WORKER_POLL_INTERVAL=1.0, OJS_WORKER_HEARTBEAT_INTERVAL=1.0),
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings",
        "DATABASE_URL": setup.direct_url,
    }
    setup.workers = [
        Process(["ojs_worker", "--concurrency", "10"], env, tmp_path / f"worker-{i}.log")
        for i in range(WORKERS)
    ]
    wait_for(lambda: setup.count("SELECT count(*) FROM ojs_worker") == WORKERS,
             setup.workers, timeout=120)  # fmt: skip
    marks = tmp_path / "starts.txt"
    before = setup.count("SELECT count(*) FROM ojs_job")
    push(setup, JOBS, marks)
    pushed = time.monotonic()
    drain(setup, marks, before + JOBS)
    seconds = time.monotonic() - pushed
    check_drain(setup, marks, JOBS, pooled_listen=True)  # test 3's listener did
    p50, worst = pickup_p50(setup, tmp_path / "pickup.txt")
    print(
        f"\nStraight to PostgreSQL, {WORKERS} workers: {JOBS} jobs drained in {seconds:.1f}s "
        f"({JOBS / seconds:.0f} jobs/s); pickup p50 {p50:.1f} ms, max {worst:.1f} ms"
    )
