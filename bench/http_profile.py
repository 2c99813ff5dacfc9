"""Where one HTTP request's time goes: each endpoint of ``make bench-http`` in one process.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_http \
        python bench/http_profile.py [--requests 2000] [--profile enqueue] [--top 40]

Calls the WSGI application of the benchmark's server (``bench.http_settings``: the example
project with its middleware, API keys and persistent connections) directly, without a
server or a network, and prints the CPU and wall time per request of each workload, plus
the number of SQL statements one request runs. ``--profile NAME`` runs that workload under
cProfile and prints the ``--top`` functions by their own and cumulative time. Run it by
hand; figures are reported in docs/explanation/performance.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.http_settings"
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_http")
os.environ.setdefault("DJANGO_DEBUG", "false")
os.environ.setdefault("OJS_LOG_LEVEL", "WARNING")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", help="a workload to run under cProfile")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()

    url = os.environ["DATABASE_URL"]
    os.environ["DATABASE_URL"] = (
        url + ("&" if "?" in url else "?") + "conn_max_age=600&conn_health_checks=true"
    )
    from bench.http_api import QUEUE, fill, setup

    key = setup()
    from django.core.wsgi import get_wsgi_application
    from django.db import connection, reset_queries

    application = get_wsgi_application()
    auth = f"Bearer {key}"

    def call(method: str, path: str, body: Any = None) -> tuple[str, bytes]:
        data = b"" if body is None else json.dumps(body).encode()
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1",
            "HTTP_AUTHORIZATION": auth,
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.version": (1, 0),
        }
        status: list[str] = []
        chunks = application(environ, lambda s, h, *a: status.append(s))
        out = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
        return status[0], out

    fetched: list[str] = []

    def fetch(count: int) -> None:
        _, out = call("POST", "/ojs/v1/workers/fetch",
                      {"queues": [QUEUE], "count": count, "worker_id": "profile"})  # fmt: skip
        fetched.extend(job["id"] for job in json.loads(out)["jobs"])

    def ack() -> None:
        if not fetched:
            fetch(10)
        call("POST", "/ojs/v1/workers/ack", {"job_id": fetched.pop(), "worker_id": "profile"})

    def job(*args: int) -> dict[str, Any]:
        return {"type": "bench.noop", "args": list(args), "options": {"queue": "bench-http-in"}}

    workloads: dict[str, Callable[[int], Any]] = {
        "plain_json": lambda i: call("GET", "/bench/plain/json"),
        "plain_insert": lambda i: call("POST", "/bench/plain/insert", {"type": "x", "args": [i]}),
        "enqueue": lambda i: call("POST", "/ojs/v1/jobs", job(i)),
        "batch100": lambda i: call(
            "POST", "/ojs/v1/jobs/batch", {"jobs": [job(i, n) for n in range(100)]}
        ),
        "fetch1": lambda i: fetch(1),
        "ack": lambda i: ack(),
        "heartbeat": lambda i: call(
            "POST",
            "/ojs/v1/workers/heartbeat",
            {"worker_id": "profile", "active_jobs": fetched[:10]},
        ),
    }
    fill(args.requests * 3)
    fetch(10)
    # Warm up: the first requests compile statements and fill caches.
    for run in workloads.values():
        for i in range(50):
            run(i)
    print(f"{'workload':12} {'cpu µs':>8} {'wall µs':>8} {'queries':>8}")
    connection.force_debug_cursor = True
    for name, run in workloads.items():
        n = args.requests // 10 if name == "batch100" else args.requests
        reset_queries()
        run(0)
        queries = len(connection.queries)
        if os.environ.get("SHOW_SQL"):
            for q in connection.queries:
                print("   ", (q["sql"] or "?")[:400])
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(n):
            run(i)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        print(f"{name:12} {cpu / n * 1e6:8.0f} {wall / n * 1e6:8.0f} {queries:8d}")
    connection.force_debug_cursor = False
    if args.profile:
        run = workloads[args.profile]
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
        for i in range(args.requests):
            run(i)
        profiler.disable()
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
