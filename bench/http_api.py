"""Benchmark: the OJS HTTP binding beside plain Django views, same server, same run (by hand).

    make bench-http
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_http \
        python bench/http_api.py --server gthread --rounds 3 --seconds 10

Starts one server (``--server``: gunicorn ``gthread`` or ``sync``, ``granian`` in WSGI
mode, or ``uvicorn`` with Django's ASGI handler) of ``--workers`` processes (default one
per core) serving ``bench.http_settings``: the example project, with API-key
authentication and persistent PostgreSQL connections as in production, plus the two plain
Django views of ``bench/http_reference.py``. Then, ``--rounds`` times, it drives every
workload for ``--seconds`` from ``--clients`` client threads in two processes (keep-alive
connections, stdlib ``http.client``) on the same machine:

* ``plain_json``: ``GET /bench/plain/json`` (no database): Django's own ceiling;
* ``plain_insert``: ``POST /bench/plain/insert``, parse a JSON body, INSERT one row
  (autocommit), ``201``: **the reference** every other figure is divided by;
* ``enqueue``: ``POST /ojs/v1/jobs``;
* ``batch100``: ``POST /ojs/v1/jobs/batch`` of 100 jobs (counted in jobs);
* ``fetch_ack``: ``POST /ojs/v1/workers/fetch`` of one job, then ``/workers/ack`` of it;
* ``fetch10_ack``: a fetch of ``count=10``, then one ACK per job (the realistic worker
  where the binding has no batch ACK; counted in jobs);
* ``round_trip``: enqueue, fetch and ACK one job in a row;
* not run unless named in ``--workloads``: ``enqueue_bare`` and ``fetch_ack_bare``, the
  same as ``enqueue`` and ``fetch_ack`` through the plain Django views of
  ``bench/http_reference.py`` that do the OJS operation without DRF (what DRF costs).

Each round runs the workloads in turn against the same server, so the machine's drift
touches them alike; the report gives each workload's jobs (or requests) per second, its
latency per operation (p50/p99), its errors, the CPU time (µs) the server's processes,
PostgreSQL's and the clients' spent per job or request, and its ratio to ``plain_insert``
of the same round, then the median of the rounds. Figures are reported in
docs/explanation/performance.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # django_ojs, example_project and bench
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.http_settings"
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_http")

QUEUE = "bench-http"  # filled before the fetch workloads
PUSH_QUEUE = "bench-http-in"  # enqueue and batch100 (no worker takes them)
ROUND_TRIP_QUEUE = "bench-http-rt"
REFERENCE = "plain_insert"
WORKLOADS = (
    "plain_json",
    "plain_insert",
    "enqueue",
    "batch100",
    "fetch_ack",
    "fetch10_ack",
    "round_trip",
)
#: Diagnostic workloads, run only when named (``--workloads``).
BARE_WORKLOADS = ("enqueue_bare", "fetch_ack_bare")
SERVERS = ("gthread", "sync", "granian", "uvicorn")


def setup() -> str:
    """Create and migrate the database, the reference table; a new admin API key."""
    from bench.enqueue import setup as setup_database

    setup_database()
    from django.db import connection

    from bench.http_reference import CREATE_TABLE
    from django_ojs import apikeys

    with connection.cursor() as cursor:
        cursor.execute(CREATE_TABLE)
        cursor.execute("TRUNCATE ojs_apikey")
    reset()
    return apikeys.create("bench-http", "admin")[1]


def reset() -> None:
    """Empty the job tables and the reference table, as at the start of each round."""
    from django.db import connection

    from bench.http_reference import TABLE

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE ojs_job, ojs_event, ojs_worker, ojs_queue, {TABLE}")
        cursor.execute("VACUUM ANALYZE ojs_job")


def fill(n: int) -> None:
    """Queue ``n`` jobs for the fetch workloads (in process: the fill is not measured)."""
    from django.db import connection

    import django_ojs

    for start in range(0, n, 5_000):
        django_ojs.enqueue_many(
            [{"type": "bench.noop", "args": [i], "queue": QUEUE}
             for i in range(start, min(start + 5_000, n))]
        )  # fmt: skip
    # A table filled in seconds has the statistics of the empty one until autovacuum
    # catches up; a live system's are current. Analyze, as autovacuum would.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(kind: str, port: int, workers: int, threads: int) -> list[str]:
    bind = ["--bind", f"127.0.0.1:{port}"]
    if kind in ("gthread", "sync"):
        # sync: one request at a time per process; gthread: ``threads`` per process.
        cls = ["--worker-class", "gthread", "--threads", str(threads)] if kind == "gthread" else []
        return [sys.executable, "-m", "gunicorn", "example_project.wsgi", "--workers",
                str(workers), *cls, *bind, "--log-level", "warning", "--keep-alive", "30"]  # fmt: skip
    if kind == "granian":
        return [sys.executable, "-m", "granian", "--interface", "wsgi", "--workers",
                str(workers), "--blocking-threads", str(threads), "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "warning", "--no-ws",
                "example_project.wsgi:application"]  # fmt: skip
    if kind == "uvicorn":
        return [sys.executable, "-m", "uvicorn", "bench.http_asgi:application", "--workers",
                str(workers), "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log"]  # fmt: skip
    raise SystemExit(f"unknown server {kind!r}: one of {', '.join(SERVERS)}")


def start_server(
    port: int, workers: int, threads: int, kind: str = "gthread"
) -> subprocess.Popen[bytes]:
    # Persistent connections with health checks, as a production deployment runs
    # (Django's default opens a new PostgreSQL connection for every request).
    url = os.environ["DATABASE_URL"]
    url += ("&" if "?" in url else "?") + "conn_max_age=600&conn_health_checks=true"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_DEBUG": "false", "OJS_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        server_command(kind, port, workers, threads), cwd=ROOT, env=env, start_new_session=True
    )
    for _ in range(600):  # wait for readiness, not for a fixed time
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ojs/v1/health")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            raise SystemExit(f"{kind} exited before it answered")
        time.sleep(0.1)
    stop_server(server)
    raise SystemExit(f"{kind} did not answer /ojs/v1/health")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


class Client:
    """One keep-alive connection that speaks OJS JSON with a bearer key."""

    def __init__(self, port: int, key: str):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body)
        self.conn.request(method, path, payload, self.headers)
        response = self.conn.getresponse()
        data = response.read()
        return response.status, (json.loads(data) if data else {})

    def post(self, path: str, body: object, expect: int = 200) -> Any:
        status, data = self.request("POST", path, body)
        if status != expect:
            raise RuntimeError(f"POST {path}: {status} {data}")
        return data


class Empty(Exception):
    """The queue ran dry."""


def fetch(
    client: Client, worker: str, queue: str, count: int, prefix: str = "/ojs/v1/workers"
) -> list[dict[str, Any]]:
    body = client.post(f"{prefix}/fetch",
                       {"queues": [queue], "count": count, "worker_id": worker})  # fmt: skip
    jobs: list[dict[str, Any]] = body.get("jobs") or []
    return jobs


def ack(client: Client, worker: str, job: dict[str, Any], prefix: str = "/ojs/v1/workers") -> None:
    client.post(f"{prefix}/ack", {"job_id": job["id"], "worker_id": worker})


def operation(workload: str) -> Callable[[Client, str, int], int]:
    """One operation of ``workload``: it returns how many jobs (or requests) it moved."""

    def plain_json(client: Client, worker: str, i: int) -> int:
        status, _ = client.request("GET", "/bench/plain/json")
        if status != 200:
            raise RuntimeError(f"plain json: {status}")
        return 1

    def plain_insert(client: Client, worker: str, i: int) -> int:
        client.post("/bench/plain/insert", {"type": "bench.noop", "args": [i]}, 201)
        return 1

    def enqueue(
        client: Client, worker: str, i: int, queue: str = PUSH_QUEUE, path: str = "/ojs/v1/jobs"
    ) -> int:
        client.post(path, {"type": "bench.noop", "args": [i], "options": {"queue": queue}}, 201)
        return 1

    def enqueue_bare(client: Client, worker: str, i: int) -> int:
        return enqueue(client, worker, i, path="/bench/bare/jobs")

    def batch100(client: Client, worker: str, i: int) -> int:
        jobs = [{"type": "bench.noop", "args": [i, n], "options": {"queue": PUSH_QUEUE}}
                for n in range(100)]  # fmt: skip
        client.post("/ojs/v1/jobs/batch", {"jobs": jobs}, 201)
        return 100

    def fetch_ack(client: Client, worker: str, i: int, prefix: str = "/ojs/v1/workers") -> int:
        jobs = fetch(client, worker, QUEUE, 1, prefix)
        if not jobs:
            raise Empty
        ack(client, worker, jobs[0], prefix)
        return 1

    def fetch_ack_bare(client: Client, worker: str, i: int) -> int:
        return fetch_ack(client, worker, i, "/bench/bare")

    def fetch10_ack(client: Client, worker: str, i: int) -> int:
        jobs = fetch(client, worker, QUEUE, 10)
        if not jobs:
            raise Empty
        for job in jobs:
            ack(client, worker, job)
        return len(jobs)

    def round_trip(client: Client, worker: str, i: int) -> int:
        enqueue(client, worker, i, ROUND_TRIP_QUEUE)
        jobs = fetch(client, worker, ROUND_TRIP_QUEUE, 1)
        if not jobs:  # another client took it: its own one is left for the next fetch
            raise RuntimeError("round trip: fetch found no job")
        ack(client, worker, jobs[0])
        return 1

    ops: dict[str, Callable[[Client, str, int], int]] = {
        "plain_json": plain_json,
        "plain_insert": plain_insert,
        "enqueue": enqueue,
        "batch100": batch100,
        "fetch_ack": fetch_ack,
        "fetch10_ack": fetch10_ack,
        "round_trip": round_trip,
        "enqueue_bare": enqueue_bare,
        "fetch_ack_bare": fetch_ack_bare,
    }
    return ops[workload]


def client_process(
    port: int, key: str, workload: str, threads: int, seconds: float, tag: int,
    out: multiprocessing.Queue,
) -> None:  # fmt: skip
    latencies: list[float] = []
    moved = [0]
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)
    deadline = [0.0]
    op = operation(workload)

    def run(n: int) -> None:
        client = Client(port, key)
        worker = f"bench-{tag}-{n}"
        own: list[float] = []
        units = 0
        i = 0
        start.wait()
        while time.perf_counter() < deadline[0]:
            t0 = time.perf_counter()
            try:
                units += op(client, worker, i)
            except Empty:
                break
            except Exception as exc:
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                client = Client(port, key)  # a fresh connection after any failure
                continue
            own.append(time.perf_counter() - t0)
            i += 1
        with lock:
            latencies.extend(own)
            moved[0] += units

    pool = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    start.wait()
    began = time.perf_counter()
    for t in pool:
        t.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((latencies, moved[0], errors, time.perf_counter() - began,
             usage.ru_utime + usage.ru_stime))  # fmt: skip


def cpu_ticks(server_pid: int) -> dict[str, dict[str, int]]:
    """CPU ticks used so far by each process of the server and of PostgreSQL (Linux /proc)."""
    found: dict[str, dict[str, int]] = {"server": {}, "postgres": {}}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime
        if int(fields[2]) == server_pid:  # the process group of the server
            found["server"][pid] = ticks
        elif comm.startswith("postgres"):
            found["postgres"][pid] = ticks
    return found


def cpu_used(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, float]:
    """Seconds of CPU each group used between two :func:`cpu_ticks` (processes that ended
    in between are left out; those that started are counted whole)."""
    tick = os.sysconf("SC_CLK_TCK")
    return {
        group: sum(t - before[group].get(pid, 0) for pid, t in after[group].items()) / tick
        for group in after
    }


def drive(
    port: int, key: str, workload: str, clients: int, seconds: float, server_pid: int = 0
) -> dict[str, Any]:
    processes = 2
    out: multiprocessing.Queue = multiprocessing.Queue()
    per = [clients // processes + (1 if n < clients % processes else 0) for n in range(processes)]
    procs = [
        multiprocessing.Process(target=client_process,
                                args=(port, key, workload, per[n], seconds, n, out))
        for n in range(processes) if per[n]
    ]  # fmt: skip
    before = cpu_ticks(server_pid) if server_pid else {}
    for p in procs:
        p.start()
    latencies: list[float] = []
    errors: list[str] = []
    units = 0
    elapsed = 0.0
    client_cpu = 0.0
    for _ in procs:
        lat, moved, errs, took, cpu = out.get()
        latencies += lat
        errors += errs
        units += moved
        client_cpu += cpu
        elapsed = max(elapsed, took)
    for p in procs:
        p.join()
    used = cpu_used(before, cpu_ticks(server_pid)) if server_pid else {}
    latencies.sort()
    # CPU per job (or request), in µs: where the machine's two cores went.
    cpu = {name: seconds / units * 1e6 if units else 0.0 for name, seconds in used.items()}
    cpu["client"] = client_cpu / units * 1e6 if units else 0.0
    return {
        "cpu_us": cpu,
        "per_s": units / elapsed if elapsed else 0.0,
        "ops_per_s": len(latencies) / elapsed if elapsed else 0.0,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else 0.0,
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000 if latencies else 0.0,
        "units": units,
        "errors": len(errors),
        "first_errors": errors[:3],
    }


def run_round(
    port: int, key: str, args: argparse.Namespace, server_pid: int
) -> dict[str, dict[str, Any]]:
    reset()
    results: dict[str, dict[str, Any]] = {}
    for workload in args.workloads:
        if workload in ("fetch_ack", "fetch10_ack", "fetch_ack_bare"):
            fill(args.fill)
        results[workload] = drive(port, key, workload, args.clients, args.seconds, server_pid)
        for error in results[workload]["first_errors"]:
            print(f"  {workload} error: {error}", file=sys.stderr)
    reference = results.get(REFERENCE, {}).get("per_s") or 0.0
    for r in results.values():
        r["ratio"] = r["per_s"] / reference if reference else 0.0
    return results


def report(rounds: list[dict[str, dict[str, Any]]], workloads: list[str]) -> None:
    print(f"{'workload':13} {'per s':>9} {'x insert':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'errors':>7} {'server':>7} {'pg':>6} {'client':>7}   ratio each round")  # fmt: skip
    for w in workloads:
        rs = [r[w] for r in rounds]
        ratios = ", ".join(f"{r['ratio']:.2f}" for r in rs)
        print(
            f"{w:13} {statistics.median(r['per_s'] for r in rs):9,.0f} "
            f"{statistics.median(r['ratio'] for r in rs):9.2f} "
            f"{statistics.median(r['p50_ms'] for r in rs):8.1f} "
            f"{statistics.median(r['p99_ms'] for r in rs):8.1f} "
            f"{sum(r['errors'] for r in rs):7d} "
            + " ".join(
                f"{statistics.median(r['cpu_us'][k] for r in rs):{width}.0f}"
                for k, width in (("server", 7), ("postgres", 6), ("client", 7))
            )
            + f"   {ratios}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=SERVERS, default="gthread")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--threads", type=int, default=4, help="threads per server process")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill", type=int, default=40_000, help="jobs queued per fetch workload")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", help="write every round's figures to this file")
    args = parser.parse_args()
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(args.workloads) - set(WORKLOADS) - set(BARE_WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}")
    if args.server in ("granian", "uvicorn") and not shutil.which(
        args.server, path=str(Path(sys.executable).parent)
    ):
        raise SystemExit(f"{args.server} is not installed: pip install {args.server}")
    key = setup()
    port = free_port()
    server = start_server(port, args.workers, args.threads, args.server)
    rounds = []
    try:
        print(f"{args.server}, {args.workers} processes"
              + (f" x {args.threads} threads" if args.server in ("gthread", "granian") else "")
              + f"; {args.clients} client threads in 2 processes; {args.seconds:.0f} s per "
              f"workload; {args.rounds} rounds")  # fmt: skip
        for n in range(args.rounds):
            rounds.append(run_round(port, key, args, server.pid))
            print(f"round {n + 1}: " + ", ".join(
                f"{w} {r['per_s']:,.0f} ({r['ratio']:.2f})" for w, r in rounds[-1].items()
            ), flush=True)  # fmt: skip
        report(rounds, args.workloads)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds}, indent=1))
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
