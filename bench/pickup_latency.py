"""Benchmark: pickup latency of an idle ``ojs_worker`` on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_worker python bench/pickup_latency.py

Starts one worker, lets it go idle (waiting in ``LISTEN``), then enqueues ``--jobs`` (200)
``test.noop`` jobs at ``--rate`` (20) per second, each in its own transaction. Prints
p50/p95/p99/max in ms of two latencies, both stamped by the same machine's clock:

* pickup: from the moment ``enqueue()`` returned (the push is committed, the NOTIFY sent)
  to the claim (``started_at``): how fast an idle worker reacts;
* end to end: from ``enqueued_at`` (stamped before the INSERT) to the claim; this adds
  the producer's own INSERT and COMMIT (a WAL flush), which depend on the disk.

``--retained 1000000`` first fills the tables with a million finished jobs and a million
events (the "flat at scale" run).
Figures are reported in docs/explanation/performance-worker.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_worker")

from bench.enqueue import reset, retain, setup  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument(
        "--retained", type=int, default=0,
        help="finished jobs (and as many events) in the tables first: 1000000 for the scale run",
    )  # fmt: skip
    args = parser.parse_args()
    setup()
    reset()
    retain(args.retained)
    from django.utils import timezone

    import django_ojs
    from django_ojs.models import Job, Worker

    env = {**os.environ, "OJS_LOG_LEVEL": "WARNING"}
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "ojs_worker"], cwd=ROOT, env=env
    )
    try:
        deadline = time.monotonic() + 30
        while not Worker.objects.filter(pid=worker.pid).exists():
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not start")
            time.sleep(0.05)
        time.sleep(1.0)  # let it settle into LISTEN
        committed = {}
        interval = 1.0 / args.rate
        next_at = time.monotonic()
        for i in range(args.jobs):
            next_at += interval
            job_id = django_ojs.enqueue("test.noop", [i]).id
            committed[job_id] = timezone.now()
            time.sleep(max(0.0, next_at - time.monotonic()))
        ids = list(committed)
        deadline = time.monotonic() + 30
        while Job.objects.filter(id__in=ids, state="completed").count() < len(ids):
            if time.monotonic() > deadline:
                raise SystemExit("not every job completed")
            time.sleep(0.05)
    finally:
        worker.terminate()
        worker.wait(30)
    rows = Job.objects.filter(id__in=ids).values_list("id", "started_at", "enqueued_at")
    pickup = [(started - committed[pk]).total_seconds() * 1000 for pk, started, _ in rows]
    end_to_end = [(started - enqueued).total_seconds() * 1000 for _, started, enqueued in rows]
    print(
        f"{len(ids)} jobs at {args.rate:g}/s into an idle worker "
        f"({args.retained:,} finished jobs and events retained):"
    )
    for name, values in (("pickup", pickup), ("end to end", end_to_end)):
        print(
            f"  {name:>10}: p50 {statistics.median(values):6.2f} ms, "
            f"p95 {percentile(values, 95):6.2f} ms, p99 {percentile(values, 99):6.2f} ms, "
            f"max {max(values):6.2f} ms"
        )


if __name__ == "__main__":
    main()
