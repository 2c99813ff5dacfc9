"""Benchmark: the OJS HTTP binding under gunicorn, end to end over loopback (run by hand).

    make bench-http
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_http \
        python bench/http_api.py --workers 2 --clients 16 --seconds 10

Starts ``gunicorn example_project.wsgi`` (``--workers`` processes, default one per core,
of ``--threads`` threads each, default 4: a thread waiting on PostgreSQL leaves the core
to another) against PostgreSQL with persistent connections and bearer API-key
authentication, as in production, then drives it
from ``--clients`` client threads spread over two client processes (keep-alive
connections, stdlib ``http.client``) for ``--seconds`` each:

* **enqueue**: ``POST /ojs/v1/jobs``;
* **fetch + ack**: ``POST /ojs/v1/workers/fetch`` (one job) then ``POST
  /ojs/v1/workers/ack`` of it, from a queue filled beforehand; counted per fetch;
* **round trip**: enqueue, fetch, ack of one job in a row, per client; counted per job.

It prints operations per second and the p50/p99 latency of one operation (a round trip's
three requests count as one). The client runs on the same 2 cores as the server and the
database, as in the OJS Go backend's published figures, which a 2-core runner measured.
Figures are reported in docs/explanation/performance.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # django_ojs and example_project
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_http")

QUEUE = "bench-http"
ROUND_TRIP_QUEUE = "bench-http-rt"


def setup() -> str:
    """Create and migrate the database, empty the job tables; a new admin API key."""
    from bench.enqueue import setup as setup_database

    setup_database()
    from django.db import connection

    from django_ojs import apikeys

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE ojs_job, ojs_event, ojs_worker, ojs_queue, ojs_apikey")
        cursor.execute("VACUUM ANALYZE ojs_job")
    return apikeys.create("bench-http", "admin")[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    # Persistent connections, as a production deployment runs (Django's default opens a
    # new PostgreSQL connection for every request: about 5 ms each here).
    url = os.environ["DATABASE_URL"]
    url += ("&" if "?" in url else "?") + "conn_max_age=600&conn_health_checks=true"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_DEBUG": "false", "OJS_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "example_project.wsgi", "--workers", str(workers),
         "--worker-class", "gthread", "--threads", str(threads),
         "--bind", f"127.0.0.1:{port}", "--log-level", "warning", "--keep-alive", "30"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    for _ in range(300):  # wait for readiness, not for a fixed time
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ojs/v1/health")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            raise SystemExit("gunicorn exited before it answered")
        time.sleep(0.1)
    server.terminate()
    raise SystemExit("gunicorn did not answer /ojs/v1/health")


class Client:
    """One keep-alive connection that speaks OJS JSON with a bearer key."""

    def __init__(self, port: int, key: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(self, path: str, body: object) -> tuple[int, dict]:
        self.conn.request("POST", path, json.dumps(body), self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else {})


def enqueue(client: Client, i: int, queue: str = QUEUE) -> None:
    status, _ = client.post("/ojs/v1/jobs", {"type": "bench.noop", "args": [i],
                                             "options": {"queue": queue}})  # fmt: skip
    assert status == 201, status


def fetch_ack(client: Client, worker: str, queue: str = QUEUE) -> bool:
    status, body = client.post("/ojs/v1/workers/fetch",
                               {"queues": [queue], "count": 1, "worker_id": worker})  # fmt: skip
    assert status == 200, (status, body)
    jobs = body.get("jobs") or []
    if not jobs:
        return False
    status, body = client.post("/ojs/v1/workers/ack", {"job_id": jobs[0]["id"],
                                                       "worker_id": worker})  # fmt: skip
    assert status == 200, (status, body)
    return True


def client_process(
    port: int,
    key: str,
    workload: str,
    threads: int,
    seconds: float,
    tag: int,
    out: multiprocessing.Queue,
) -> None:
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def run(n: int) -> None:
        client = Client(port, key)
        worker = f"bench-{tag}-{n}"
        own: list[float] = []
        i = 0
        start.wait()
        while time.perf_counter() < deadline[0]:
            t0 = time.perf_counter()
            if workload == "enqueue":
                enqueue(client, i)
            elif workload == "fetch_ack":
                if not fetch_ack(client, worker):
                    break  # the queue ran dry
            else:  # its own queue: each client fetches a job just enqueued
                enqueue(client, i, ROUND_TRIP_QUEUE)
                assert fetch_ack(client, worker, ROUND_TRIP_QUEUE)
            own.append(time.perf_counter() - t0)
            i += 1
        with lock:
            latencies.extend(own)

    pool = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    start.wait()
    began = time.perf_counter()
    for t in pool:
        t.join()
    out.put((latencies, time.perf_counter() - began))


def drive(port: int, key: str, workload: str, clients: int, seconds: float) -> dict[str, float]:
    processes = 2
    out: multiprocessing.Queue = multiprocessing.Queue()
    per = [clients // processes + (1 if n < clients % processes else 0) for n in range(processes)]
    procs = [
        multiprocessing.Process(target=client_process,
                                args=(port, key, workload, per[n], seconds, n, out))
        for n in range(processes) if per[n]
    ]  # fmt: skip
    for p in procs:
        p.start()
    latencies: list[float] = []
    elapsed = 0.0
    for _ in procs:
        lat, took = out.get()
        latencies += lat
        elapsed = max(elapsed, took)
    for p in procs:
        p.join()
    latencies.sort()
    return {
        "ops": len(latencies) / elapsed if elapsed else 0.0,
        "p50": statistics.median(latencies) * 1000 if latencies else 0.0,
        "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000 if latencies else 0.0,
        "n": len(latencies),
    }


def fill(port: int, key: str, n: int) -> None:
    client = Client(port, key)
    for start in range(0, n, 500):
        jobs = [{"type": "bench.noop", "args": [i], "options": {"queue": QUEUE}}
                for i in range(start, min(start + 500, n))]  # fmt: skip
        status, _ = client.post("/ojs/v1/jobs/batch", {"jobs": jobs})
        assert status == 201, status
    # A table filled in seconds has the statistics of the empty one until autovacuum
    # catches up; a live system's are current. Analyze, as autovacuum would.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--threads", type=int, default=4, help="gunicorn threads per worker")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fill", type=int, default=100_000, help="jobs queued for fetch + ack")
    args = parser.parse_args()
    key = setup()
    port = free_port()
    server = start_server(port, args.workers, args.threads)
    try:
        print(f"gunicorn, {args.workers} workers x {args.threads} threads (gthread); "
              f"{args.clients} client threads in 2 processes; "
              f"{args.seconds:.0f} s per workload")  # fmt: skip
        print(f"{'workload':14} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ops':>8}")
        results = {"enqueue": drive(port, key, "enqueue", args.clients, args.seconds)}
        fill(port, key, args.fill)
        results["fetch_ack"] = drive(port, key, "fetch_ack", args.clients, args.seconds)
        results["round_trip"] = drive(port, key, "round_trip", args.clients, args.seconds)
        for name, r in results.items():
            print(f"{name:14} {r['ops']:9,.0f} {r['p50']:8.2f} {r['p99']:8.2f} {r['n']:8,.0f}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
