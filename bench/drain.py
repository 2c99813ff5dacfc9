"""Benchmark: drain throughput of ``ojs_worker`` processes on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_worker python bench/drain.py

For each size (default 10,000 and 50,000): empty the tables, enqueue that many
``test.noop`` jobs, start ``--workers`` ``manage.py ojs_worker`` processes, and wait until
every job is ``completed`` (rows are kept, not pruned). Prints jobs/s measured:

* from launch: from starting the processes (Python + Django start-up included);
* from worker start: from the first ``worker.started`` event (registration) to the last
  ``completed_at``;
* draining: from the first ``started_at`` to the last ``completed_at``.

``--retained 1000000`` first fills the tables with a million finished jobs and a million
events (the "flat at scale" run: the figures must stay within 10 % of the empty tables').

Figures are reported in docs/explanation/performance-worker.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_worker")

from bench.enqueue import reset, retain, setup  # noqa: E402


def enqueue(n: int) -> None:
    import django_ojs

    batch = 5000
    for start in range(0, n, batch):
        django_ojs.enqueue_many(
            [{"type": "test.noop", "args": [i]} for i in range(start, min(n, start + batch))]
        )


def remaining() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ojs_job WHERE state IN ('available', 'active')")
        return int(cursor.fetchone()[0])


def timings() -> dict[str, float]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM min(started_at)), extract(epoch FROM max(completed_at)),"
            " count(*) FILTER (WHERE state = 'completed'), max(attempt)"
            " FROM ojs_job WHERE type = 'test.noop'"
        )
        first_start, last_done, completed, max_attempt = cursor.fetchone()
        cursor.execute(
            "SELECT extract(epoch FROM min(time)) FROM ojs_event WHERE type = 'worker.started'"
        )
        (registered,) = cursor.fetchone()
    return {
        "first_start": float(first_start),
        "last_done": float(last_done),
        "registered": float(registered),
        "completed": int(completed),
        "max_attempt": int(max_attempt),
    }


def run(
    n: int, workers: int, concurrency: int, extra: list[str], retained: int = 0
) -> dict[str, float]:
    reset()
    retain(retained)
    enqueue(n)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE ojs_job")
    env = {**os.environ, "OJS_LOG_LEVEL": "WARNING"}
    cmd = [sys.executable, str(ROOT / "manage.py"), "ojs_worker",
           "--concurrency", str(concurrency), *extra]  # fmt: skip
    launched = time.time()
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env) for _ in range(workers)]
    try:
        deadline = time.monotonic() + 600
        while remaining() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
    t = timings()
    assert t["completed"] == n, f"only {t['completed']} of {n} completed"
    return {
        "n": n,
        "from_launch": n / (t["last_done"] - launched),
        "from_worker_start": n / (t["last_done"] - t["registered"]),
        "draining": n / (t["last_done"] - t["first_start"]),
        "max_attempt": t["max_attempt"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--retained", type=int, default=0,
        help="finished jobs (and as many events) in the tables first: 1000000 for the scale run",
    )  # fmt: skip
    parser.add_argument("worker_args", nargs="*", help="extra ojs_worker flags (after --)")
    args = parser.parse_args()
    setup()
    print(
        f"{args.workers} workers x concurrency {args.concurrency}, {os.cpu_count()} CPUs, "
        f"{args.retained:,} finished jobs and events retained"
    )
    for size in [int(s) for s in args.sizes.split(",")]:
        for _ in range(args.repeat):
            r = run(size, args.workers, args.concurrency, args.worker_args, args.retained)
            print(
                f"{size:>7} jobs: {r['from_worker_start']:8.0f} jobs/s from worker start, "
                f"{r['from_launch']:8.0f} from launch, {r['draining']:8.0f} draining "
                f"(max attempt {r['max_attempt']})",
                flush=True,
            )


if __name__ == "__main__":
    main()
