"""Workers that speak only HTTP drain a queue: every job runs exactly once (PostgreSQL).

Four processes of ``http_worker.py`` (standard library only, started with ``python -I -S``
so that neither Django nor django_ojs could be imported) fetch, heartbeat and ack over
``/ojs/v1/workers/*`` against pytest-django's ``live_server``, with a real ``ojs_reaper``
process enforcing reservations. 2,000 no-op jobs and one long job, whose handler runs
2.5 times its visibility timeout and is kept alive only by the worker's heartbeats.

A control job, fetched over HTTP and then abandoned, must be reclaimed by the reaper for
a lapsed reservation: it shows the reaper enforces the visibility timeout the long job
outlives.

Written to hold on a loaded machine (``make test-under-load``): the workers have made
their first fetch before any job is enqueued, every condition is polled with deadlines
of minutes, and nothing is asserted about how fast anything ran.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import django_ojs
from django_ojs import apikeys
from django_ojs.models import Event, Job, Worker
from tests.acceptance.conftest import Process

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql,
    pytest.mark.slow,
]

WORKER_SCRIPT = Path(__file__).with_name("http_worker.py")
QUEUE = "poly"
CONTROL_QUEUE = "poly-control"
NOOP_JOBS = 2000
WORKERS = 4
#: The long job's reservation (seconds); its handler sleeps 2.5 times as long, and each
#: worker beats every HEARTBEAT_INTERVAL: about ten beats may be late before it lapses.
VISIBILITY_TIMEOUT = 4
LONG_SLEEP = 10
HEARTBEAT_INTERVAL = 0.4
#: Deadlines only: generous, for shared and loaded CI machines.
STARTUP_TIMEOUT = 120
DRAIN_TIMEOUT = 600
STOP_TIMEOUT = 120


class HttpWorker:
    """One ``http_worker.py`` process, with its output files."""

    def __init__(self, url: str, key: str, index: int, directory: Path):
        self.worker_id = f"poly-{index}-{uuid.uuid4().hex[:8]}"
        self.out = directory / f"http-worker-{index}.ids"
        self.stdout_path = directory / f"http-worker-{index}.stdout"
        self.stderr_path = directory / f"http-worker-{index}.stderr"
        # Neither DJANGO_SETTINGS_MODULE nor the test's DATABASE_URL: the worker knows
        # only the URL and the key. -I -S: no site-packages, no PYTHON* variables.
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("DJANGO", "DATABASE", "OJS_", "PYTHON"))
        }
        self._stdout = self.stdout_path.open("wb")
        self._stderr = self.stderr_path.open("wb")
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(WORKER_SCRIPT),
                "--url",
                url,
                "--key",
                key,
                "--queue",
                QUEUE,
                "--out",
                str(self.out),
                "--worker-id",
                self.worker_id,
                "--count",
                "10",
                "--poll-interval",
                "0.05",
                "--heartbeat-interval",
                str(HEARTBEAT_INTERVAL),
            ],
            env=env,
            stdout=self._stdout,
            stderr=self._stderr,
        )
        self.pid = self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def summary(self) -> dict[str, Any]:
        lines = self.stdout_path.read_text().strip().splitlines()
        assert lines, f"{self.worker_id} printed no summary; stderr:\n{self.stderr()[-3000:]}"
        return json.loads(lines[-1])

    def ids(self) -> list[str]:
        return self.out.read_text().split() if self.out.exists() else []

    def describe(self) -> str:
        return f"http worker {self.worker_id} (pid {self.pid})"

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=30)
        self._stdout.close()
        self._stderr.close()


@pytest.fixture
def http_workers(tmp_path):
    """``http_workers(url, key, n)`` starts ``n`` workers; all are killed at teardown."""
    started: list[HttpWorker] = []

    def start(url: str, key: str, n: int) -> list[HttpWorker]:
        workers = [HttpWorker(url, key, len(started) + i, tmp_path) for i in range(n)]
        started.extend(workers)
        return workers

    yield start
    for worker in started:
        worker.stop()
    for worker in started:
        # Shown by pytest when the test fails.
        print(f"--- {worker.describe()} exit {worker.returncode} ---")
        print(worker.stderr()[-3000:])


def poll(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    watch: Sequence[HttpWorker | Process] = (),
    interval: float = 0.25,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until truthy; fail at once if a watched process exited.

    A quarter of a second between polls: the live server answering the workers runs in
    this process, and a tight loop here would take its interpreter lock from it.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for process in watch:
            if process.returncode is not None:
                name = process.describe() if isinstance(process, HttpWorker) else process.args[0]
                output = process.stderr() if isinstance(process, HttpWorker) else process.output()
                raise AssertionError(
                    f"{name} exited with {process.returncode} while waiting for {what}:\n"
                    f"{output[-3000:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout}s")
        time.sleep(interval)


def request(url: str, method: str, path: str, key: str | None = None, body: Any = None):
    """One HTTP request, as any client would send it: ``(status, decoded body)``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    return response.status, (json.loads(raw) if raw else None)


def server_healthy(url: str) -> bool:
    try:
        status, _ = request(url, "GET", "/ojs/v1/health")
    except (OSError, http.client.HTTPException):
        return False
    return status == 200


#: Events of a lost attempt: a reclaim (visibility, stall, dead worker) or a failure.
TROUBLE = ("job.stalled", "job.failed", "job.retrying", "job.discarded")


def drained(expected: int) -> bool:
    """Whether all ``expected`` jobs completed; fails at once when an attempt was lost
    (the drain would then wait out its deadline for a job that cannot complete)."""
    trouble = list(
        Event.objects.filter(queue=QUEUE, type__in=TROUBLE).values("job_id", "type", "data")[:5]
    )
    assert not trouble, f"attempts lost during the drain: {trouble}"
    again = list(Job.objects.filter(queue=QUEUE, attempt__gt=1).values("id", "attempt")[:5])
    assert not again, f"jobs delivered more than once: {again}"
    return Job.objects.filter(queue=QUEUE, state="completed").count() == expected


def test_http_only_workers_drain_a_queue_each_job_exactly_once(
    live_server, processes, http_workers
):
    url = live_server.url
    poll(lambda: server_healthy(url), timeout=STARTUP_TIMEOUT, what="GET /ojs/v1/health")
    _, key = apikeys.create("polyglot drain", "worker")

    reaper = processes.reaper()
    # The control: fetched without a worker id (so no dead-worker recovery can return
    # it) and never acknowledged nor beaten for; only the reaper's visibility check can
    # make it available again.
    control = django_ojs.enqueue(
        "poly.control", queue=CONTROL_QUEUE, visibility_timeout=VISIBILITY_TIMEOUT
    )
    status, body = request(
        url, "POST", "/ojs/v1/workers/fetch", key, {"queues": [CONTROL_QUEUE], "count": 1}
    )
    assert status == 200, body
    assert [j["id"] for j in body["jobs"]] == [str(control.pk)]

    workers = http_workers(url, key, WORKERS)
    watched: list[HttpWorker | Process] = [*workers, reaper]
    # Ready: each worker's first (empty) fetch registered it. Only then are jobs enqueued.
    ids = [w.worker_id for w in workers]
    poll(
        lambda: Worker.objects.filter(id__in=ids).count() == WORKERS,
        timeout=STARTUP_TIMEOUT,
        watch=watched,
        what="the workers' first fetch",
    )

    # The long job first: FIFO puts it in the first batch a worker fetches.
    enqueued = django_ojs.enqueue_many(
        [
            {
                "type": "poly.long",
                "args": [{"sleep_s": LONG_SLEEP}],
                "queue": QUEUE,
                "visibility_timeout": VISIBILITY_TIMEOUT,
            }
        ]
        + [{"type": "poly.noop", "args": [i], "queue": QUEUE} for i in range(NOOP_JOBS)]
    )
    long_job = enqueued[0]
    assert long_job.type == "poly.long"
    assert long_job.visibility_timeout_ms == VISIBILITY_TIMEOUT * 1000
    all_ids = {str(j.pk) for j in enqueued}
    assert len(all_ids) == NOOP_JOBS + 1

    poll(
        lambda: drained(len(all_ids)),
        timeout=DRAIN_TIMEOUT,
        watch=watched,
        what=f"{len(all_ids)} jobs completed",
    )
    # The reaper did reclaim the abandoned control job for its lapsed reservation.
    poll(
        lambda: Event.objects.filter(job_id=control.pk, type="job.stalled").exists(),
        timeout=STARTUP_TIMEOUT,
        watch=[reaper],
        what="the reaper reclaiming the control job",
    )
    assert reaper.returncode is None, reaper.output()[-3000:]

    for worker in workers:
        worker.popen.send_signal(signal.SIGTERM)
    codes = {w.worker_id: w.popen.wait(timeout=STOP_TIMEOUT) for w in workers}
    assert codes == dict.fromkeys(codes, 0), {w.worker_id: w.stderr()[-2000:] for w in workers}

    # Every job completed at its first attempt: none was delivered twice.
    stored = list(Job.objects.filter(queue=QUEUE).values("id", "state", "attempt", "worker_id"))
    assert len(stored) == len(all_ids)
    assert Counter(j["state"] for j in stored) == {"completed": len(all_ids)}
    assert Counter(j["attempt"] for j in stored) == {1: len(all_ids)}
    started = Counter(
        Event.objects.filter(type="job.started", queue=QUEUE).values_list("job_id", flat=True)
    )
    assert {str(pk) for pk in started} == all_ids and set(started.values()) == {1}

    # The workers' own record: each job ran exactly once, in the worker that held it.
    ran = {w.worker_id: w.ids() for w in workers}
    union = [job_id for ids in ran.values() for job_id in ids]
    assert len(union) == len(all_ids), Counter(union).most_common(3)
    assert set(union) == all_ids
    holder = {str(j["id"]): j["worker_id"] for j in stored}
    for worker_id, job_ids in ran.items():
        assert {holder[j] for j in job_ids} <= {worker_id}
    # More than one worker took part (not all four: a loaded machine may starve one).
    assert sum(1 for job_ids in ran.values() if job_ids) >= 2, {k: len(v) for k, v in ran.items()}

    # No worker saw an error answer, a redelivery, a refused ack or a lost reservation.
    summaries = [w.summary() for w in workers]
    print(*summaries, sep="\n")  # shown when the test fails
    for summary, worker in zip(summaries, workers, strict=True):
        assert summary["exit"] == 0
        assert summary["non_2xx"] == 0, worker.stderr()[-3000:]
        troubles = (summary["redelivered"], summary["ack_refused"], summary["reservations_lost"])
        assert troubles == (0, 0, 0), worker.stderr()[-3000:]
        assert summary["ran"] == summary["acked"] == len(ran[worker.worker_id])

    # The long job outlived its reservation, kept alive by heartbeats alone.
    long_stored = Job.objects.get(pk=long_job.pk)
    assert long_stored.state == "completed" and long_stored.attempt == 1
    assert long_stored.error is None
    assert (long_stored.completed_at - long_stored.started_at).total_seconds() >= LONG_SLEEP
    kinds = Counter(
        Event.objects.filter(job_id=long_job.pk).values_list("type", flat=True).order_by()
    )
    assert kinds["job.started"] == kinds["job.completed"] == 1, kinds
    assert not set(TROUBLE) & set(kinds), kinds
    # LONG_SLEEP / VISIBILITY_TIMEOUT = 2.5: at least two renewals were needed.
    assert kinds["job.heartbeat"] >= 2, kinds
    (beats,) = [s["long_job_beats"] for s in summaries if s["long_job_beats"]]
    assert beats == {str(long_job.pk): beats[str(long_job.pk)]}
    assert beats[str(long_job.pk)] >= 2

    # The control job: reclaimed because its reservation lapsed (visibility timeout).
    control_stored = Job.objects.get(pk=control.pk)
    assert control_stored.state == "available" and control_stored.attempt == 1
    assert control_stored.error["type"] == "visibility_timeout", control_stored.error
    stalled = Event.objects.get(job_id=control.pk, type="job.stalled")
    assert stalled.data["error"]["type"] == "visibility_timeout", stalled.data
