"""Workers across a real PostgreSQL restart, on a private cluster this test starts.

Opt-in (``make test-pg-restart``, or ``OJS_TEST_PG_RESTART=1``): it needs the PostgreSQL
server binaries (``initdb``, ``pg_ctl``) and, when run as root, the ``postgres`` user. It
creates a throw-away cluster on a free port under /tmp, migrates it, starts two
``ojs_worker`` processes against it, then stops and starts the server while the workers
are idle and while they are busy. The server stays down until every worker has noticed
(its log says so), so connection attempts are refused for a while and the back-off, the
outcome writer's retries and the reconnections are all exercised. No worker may exit and
every job must complete. The shared server the rest of the suite uses is not touched.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.conftest import FAST_TIMERS, ROOT, Process, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.pg_restart,
    pytest.mark.skipif(
        os.environ.get("OJS_TEST_PG_RESTART") != "1",
        reason="real PostgreSQL restarts are opt-in: make test-pg-restart",
    ),
]


class Cluster:
    """A private PostgreSQL cluster: ``initdb`` + ``pg_ctl`` on a free port."""

    def __init__(self, root: Path):
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        found = shutil.which("pg_ctl") or (binaries[-1] if binaries else None)
        if found is None:
            pytest.skip("no PostgreSQL server binaries (pg_ctl) found")
        self.bin = Path(found).parent
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/ojs_restart"

    def run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=120,
        )

    def init(self) -> None:
        if self.as_user:
            shutil.chown(self.root, "postgres")
        self.run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "server.log")
        self.run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def query(self, sql: str, dbname: str = "ojs_restart") -> Any:
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True
        ) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchone() if cursor.description else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="ojs-pg-restart-"))
    cluster = Cluster(root)
    cluster.init()
    cluster.start()
    try:
        cluster.query("CREATE DATABASE ojs_restart", dbname="postgres")
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=environment(cluster.url),
            check=True,
            timeout=300,
        )
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def environment(url: str, **timers: Any) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings",
        "DATABASE_URL": url,
        "OJS_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({name: json.dumps(value) for name, value in {**FAST_TIMERS, **timers}.items()})
    return env


def wait(predicate: Callable[[], Any], workers: list[Process], timeout: float = 120) -> None:
    """Poll until ``predicate()`` holds; fail at once if a worker exited. Connection
    errors count as "not yet" (the server may be restarting)."""
    wait_for(predicate, workers, timeout, tolerate=(psycopg.OperationalError,))


def enqueue(url: str, count: int, job: dict[str, Any]) -> None:
    code = f"import django_ojs; django_ojs.enqueue_many([{job!r}] * {count})"
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        cwd=ROOT,
        env=environment(url),
        check=True,
        timeout=120,
    )


def test_workers_survive_real_restarts_idle_and_busy(cluster, tmp_path):
    env = environment(cluster.url, OJS_VISIBILITY_TIMEOUT=5)
    workers = [
        Process(["ojs_worker", "--concurrency", "10"], env, tmp_path / f"worker-{i}.log")
        for i in range(2)
    ]
    try:
        wait(lambda: cluster.query("SELECT count(*) FROM ojs_worker")[0] == 2, workers)

        def completed() -> int:
            return int(cluster.query("SELECT count(*) FROM ojs_job WHERE state = 'completed'")[0])

        def restart_when_noticed(loop: str) -> None:
            """Stop the server; start it again once each worker logged that ``loop``
            lost the database (so refused connections are retried meanwhile)."""
            marks = [process.output().count(f"{loop}: database unavailable") for process in workers]
            cluster.stop()
            wait(
                lambda: all(
                    p.output().count(f"{loop}: database unavailable") > mark
                    for p, mark in zip(workers, marks, strict=True)
                ),
                workers,
            )
            cluster.start()

        # Idle: both workers wait on LISTEN when the server goes away (their fetchers,
        # polling, notice first; the listeners reconnect once fetching works again).
        restart_when_noticed("fetcher")
        enqueue(cluster.url, 200, {"type": "test.noop"})
        wait(lambda: completed() == 200, workers)

        # Busy: 400 jobs of 100 ms on 20 slots; the server goes away part-way, and stays
        # away until the outcome writers have failed to record finished jobs.
        enqueue(cluster.url, 400, {"type": "test.slow", "args": [{"duration_ms": 100}]})
        wait(lambda: completed() >= 300, workers)
        restart_when_noticed("outcome writer")
        wait(lambda: completed() == 600, workers, timeout=180)

        assert cluster.query("SELECT count(*) FROM ojs_job WHERE state <> 'completed'")[0] == 0
        assert all(process.returncode is None for process in workers)
        for process in workers:
            log = process.output()
            assert "database available again" in log
            assert "Traceback" not in log
            process.signal(signal.SIGTERM)
        assert [process.wait(60) for process in workers] == [0, 0]
    finally:
        for process in workers:
            process.stop()
            print(f"--- worker (pid {process.pid}) ---\n{process.output()[-4000:]}")
