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
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.acceptance.clusters import Cluster, ToolFailed, environment, migrate
from tests.acceptance.conftest import ROOT, Process, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.pg_restart,
    pytest.mark.skipif(
        os.environ.get("OJS_TEST_PG_RESTART") != "1",
        reason="real PostgreSQL restarts are opt-in: make test-pg-restart",
    ),
]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="ojs-pg-restart-"))
    cluster = Cluster(root, "ojs_restart")
    cluster.init()
    cluster.start()
    try:
        cluster.query("CREATE DATABASE ojs_restart", dbname="postgres")
        migrate(cluster.url)
        yield cluster
    finally:
        with contextlib.suppress(ToolFailed):  # already stopped
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


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
