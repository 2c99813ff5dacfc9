"""Benchmark: the official OJS Python SDK's own worker against django-ojs (run by hand).

    python3 -m venv /tmp/sdkvenv
    /tmp/sdkvenv/bin/pip install <ojs-python-sdk checkout> cryptography
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_sdk \
        python bench/sdk_worker.py --jobs 2000 --processes 1

The SDK (PyPI name ``openjobspec``, import name ``ojs``) runs unmodified in its own
virtualenv (``--sdk-python``); ``import ojs`` needs ``cryptography``, which its package does
not declare. Its HTTP transport reads a response body only when the Content-Type contains
``application/json``, so the server must run with ``OJS_RESPONSE_CONTENT_TYPE =
"application/json"``: with the OJS media type every fetch looks empty to it.

Without ``--url`` it starts a server as ``bench/http_api.py`` does (gunicorn gthread,
``--server-workers`` x ``--server-threads``, API-key authentication, persistent PostgreSQL
connections), on ``DATABASE_URL`` (emptied first), with ``OJS_RESPONSE_CONTENT_TYPE`` set.
With ``--url`` it uses that running server and ``--key`` (a bearer API key, or none when
the server runs with ``OJS_API_AUTH=none``), and a queue of its own per run.

It queues ``--jobs`` no-op jobs with ``POST /ojs/v1/jobs/batch``, starts ``--processes``
processes that each build an ``ojs.Worker`` with a no-op handler registered for the job
type (``@worker.register``) and import everything before the clock starts, then releases
them together and polls ``GET /ojs/v1/queues/<queue>/stats`` until every job is completed.
It prints jobs/s over the whole drain and over its middle 80 %, then stops the workers
with SIGTERM (their own graceful shutdown).

The SDK fetches one job per request (``count=1`` is fixed in ``Worker._fetch_loop``) and
has a single fetch loop per worker, so throughput is about one fetch round trip per job per
process; ``--concurrency`` (jobs run at once, default 10) and ``--poll-interval`` (sleep
after an empty fetch, default 2 s) are passed to ``ojs.Worker``. The client runs on the
same cores as the server and the database: the figure is as noisy as the machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench, django_ojs and example_project
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_sdk")

from bench.http_api import free_port, setup, start_server  # noqa: E402

JOB_TYPE = "bench.noop"
BATCH = 500

# Runs in the SDK's virtualenv: argv[1] is a JSON config. Prints "ready" once the SDK is
# imported and the worker built, then waits for a line on stdin before it starts.
WORKER = r"""
import asyncio, json, sys
cfg = json.loads(sys.argv[1])
import ojs
worker = ojs.Worker(cfg["url"], queues=[cfg["queue"]], headers=cfg["headers"], **cfg["knobs"])

@worker.register(cfg["job_type"])
async def noop(ctx):
    return None

print("ready", worker.worker_id, flush=True)
sys.stdin.readline()
asyncio.run(worker.start())
"""


class Api:
    """One keep-alive connection to the server, JSON in and out."""

    def __init__(self, url: str, key: str | None):
        parts = urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        self.conn = cls(parts.hostname or "127.0.0.1", parts.port, timeout=60)
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"

    def request(self, method: str, path: str, body: object = None) -> tuple[int, str, dict]:
        payload = None if body is None else json.dumps(body)
        self.conn.request(method, path, payload, self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return (
            response.status,
            response.getheader("Content-Type", ""),
            (json.loads(data) if data else {}),
        )


def fill(api: Api, queue: str, n: int) -> None:
    for start in range(0, n, BATCH):
        jobs = [{"type": JOB_TYPE, "args": [i], "options": {"queue": queue}}
                for i in range(start, min(start + BATCH, n))]  # fmt: skip
        status, _, body = api.request("POST", "/ojs/v1/jobs/batch", {"jobs": jobs})
        if status != 201:
            raise SystemExit(f"POST /ojs/v1/jobs/batch: {status} {body}")


def counts(api: Api, queue: str) -> dict[str, int]:
    status, _, body = api.request("GET", f"/ojs/v1/queues/{queue}/stats")
    if status != 200:
        raise SystemExit(f"GET /ojs/v1/queues/{queue}/stats: {status} {body}")
    return body.get("stats") or body.get("queue") or {}


def start_workers(args: argparse.Namespace, url: str, key: str | None, queue: str) -> list:
    knobs: dict[str, float] = {}
    if args.concurrency is not None:
        knobs["concurrency"] = args.concurrency
    if args.poll_interval is not None:
        knobs["poll_interval"] = args.poll_interval
    if args.heartbeat_interval is not None:
        knobs["heartbeat_interval"] = args.heartbeat_interval
    cfg = {
        "url": url,
        "queue": queue,
        "job_type": JOB_TYPE,
        "headers": {"Authorization": f"Bearer {key}"} if key else {},
        "knobs": knobs,
    }
    procs = [
        subprocess.Popen([args.sdk_python, "-c", WORKER, json.dumps(cfg)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(args.processes)
    ]  # fmt: skip
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("ready"):
            stop_workers(procs)
            raise SystemExit(f"an SDK worker did not start (exit code {p.poll()}); see above")
    return procs


def go(procs: list) -> None:
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def stop_workers(procs: list) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # the SDK's graceful shutdown
    deadline = time.monotonic() + 40  # its grace period is 25 s, its loops sleep up to 5 s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def drain(api: Api, queue: str, n: int, timeout: float) -> dict[str, float]:
    """Poll the queue's statistics until ``n`` jobs are completed; times from now."""
    t0 = time.perf_counter()
    marks: dict[str, float] = {}
    last: dict[str, int] = {}
    while True:
        last = counts(api, queue)
        now = time.perf_counter() - t0
        done = int(last.get("completed", 0))
        for name, frac in (("first", 1 / n), ("p10", 0.1), ("p90", 0.9)):
            if name not in marks and done >= frac * n:
                marks[name] = now
        if done >= n:
            marks["all"] = now
            return marks
        if done + int(last.get("discarded", 0)) + int(last.get("cancelled", 0)) >= n:
            raise SystemExit(f"jobs ended other than completed: {last}")
        if now > timeout:
            raise SystemExit(f"not drained after {timeout:.0f} s: {last}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running django-ojs server (default: start one)")
    parser.add_argument("--key", default=os.environ.get("OJS_API_KEY"),
                        help="bearer API key for --url (default $OJS_API_KEY)")  # fmt: skip
    parser.add_argument(
        "--queue", help="queue name (default: bench-sdk, or a fresh one with --url)"
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=1, help="SDK worker processes")
    parser.add_argument("--sdk-python", default="/tmp/sdkvenv/bin/python",
                        help="python of the virtualenv the SDK is installed in")  # fmt: skip
    parser.add_argument("--concurrency", type=int, help="ojs.Worker(concurrency=) (SDK: 10)")
    parser.add_argument("--poll-interval", type=float,
                        help="ojs.Worker(poll_interval=), seconds idle after an empty fetch (SDK: 2)")  # fmt: skip
    parser.add_argument("--heartbeat-interval", type=float,
                        help="ojs.Worker(heartbeat_interval=) (SDK: 5)")  # fmt: skip
    parser.add_argument("--server-workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--server-threads", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (s)")
    args = parser.parse_args()
    if args.jobs < 1 or args.processes < 1:
        parser.error("--jobs and --processes must be at least 1")

    server = None
    if args.url:
        url, key = args.url.rstrip("/"), args.key
        queue = args.queue or f"bench-sdk-{uuid.uuid4().hex[:8]}"
    else:
        # The SDK reads no body whose Content-Type lacks "application/json".
        os.environ["OJS_RESPONSE_CONTENT_TYPE"] = "application/json"
        key = setup()
        port = free_port()
        server = start_server(port, args.server_workers, args.server_threads)
        url, queue = f"http://127.0.0.1:{port}", args.queue or "bench-sdk"
    procs: list = []
    try:
        api = Api(url, key)
        status, content_type, _ = api.request("GET", "/ojs/v1/health")
        if status != 200:
            raise SystemExit(f"GET /ojs/v1/health: {status}")
        if "application/json" not in content_type:
            raise SystemExit(f"the server answers Content-Type {content_type!r}: the SDK reads "
                             "no such body; run it with OJS_RESPONSE_CONTENT_TYPE="
                             "application/json")  # fmt: skip
        fill(api, queue, args.jobs)
        if server is not None:  # our own database: analyze, as autovacuum would
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("ANALYZE ojs_job")
        before = counts(api, queue)
        if int(before.get("available", 0)) < args.jobs or int(before.get("completed", 0)):
            raise SystemExit(f"queue {queue!r} is not as filled: {before}")
        procs = start_workers(args, url, key, queue)
        go(procs)
        marks = drain(api, queue, args.jobs, args.timeout)
        mid = marks["p90"] - marks["p10"]
        print(f"official OJS Python SDK worker: {args.processes} process(es), "
              f"concurrency {args.concurrency or 'default (10)'}, {args.jobs} jobs, "
              f"queue {queue}{', own gunicorn ' if server else ''}"
              f"{f'{args.server_workers}x{args.server_threads}' if server else ''}")  # fmt: skip
        print(f"drained in {marks['all']:.2f} s (first completion after "
              f"{marks['first'] * 1000:.0f} ms): {args.jobs / marks['all']:,.0f} jobs/s; "
              f"middle 80 %: {0.8 * args.jobs / mid if mid > 0 else float('nan'):,.0f} jobs/s")  # fmt: skip
    finally:
        stop_workers(procs)
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
