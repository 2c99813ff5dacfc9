"""Benchmark: what a worker pool's fetch costs next to a plain fetch (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_pools python bench/pools.py

Fills two queues with ``--jobs`` available jobs each, then claims ``--claims`` jobs in one
process, fetch after fetch of ``count`` jobs, four ways: a plain two-queue fetch
(``lifecycle.Fetch``, queues in order), and ``lifecycle.PoolFetch`` of a ``strict``, a
``weighted`` (3:1) and a ``least-loaded`` pool over the same queues. Prints the mean time
per fetch and claimed jobs per second for each, and the weighted pool's split. The tables
are emptied between runs. Figures are reported in
docs/how-to/share-workers-across-queues.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_pools")

from bench.enqueue import reset, setup  # noqa: E402

QUEUES = ["bench-a", "bench-b"]


def fill(n: int) -> None:
    import django_ojs

    for queue in QUEUES:
        for start in range(0, n, 5000):
            django_ojs.enqueue_many(
                [{"type": "test.noop", "args": [i], "queue": queue}
                 for i in range(start, min(n, start + 5000))]
            )  # fmt: skip


def run(kind: str, jobs: int, claims: int, count: int) -> tuple[float, Counter[str]]:
    from django_ojs import lifecycle

    reset()
    lifecycle.forget_pools()
    fill(jobs)
    if kind == "plain":
        fetch = lifecycle.Fetch(QUEUES, worker_id="bench", register=False)
    else:
        lifecycle.save_pool("bench", QUEUES, strategy=kind, weights={"bench-a": 3})
        fetch = lifecycle.PoolFetch("bench", worker_id="bench", register=False)
    got: Counter[str] = Counter()
    fetches = claims // count
    start = time.perf_counter()
    for _ in range(fetches):
        for job in fetch(count):
            got[job.queue] += 1
    elapsed = time.perf_counter() - start
    return elapsed / fetches, got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="available jobs per queue")
    parser.add_argument("--claims", type=int, default=4_000, help="jobs claimed per run")
    parser.add_argument("--counts", default="1,10", help="fetch sizes, comma-separated")
    args = parser.parse_args()
    setup()
    for count in [int(c) for c in args.counts.split(",")]:
        for kind in ("plain", "strict", "weighted", "least-loaded"):
            per_fetch, got = run(kind, args.jobs, args.claims, count)
            split = ", ".join(f"{q}: {n}" for q, n in sorted(got.items()))
            print(f"count={count:<3} {kind:<13} {per_fetch * 1000:7.3f} ms/fetch "
                  f"{count / per_fetch:8.0f} jobs/s  ({split})")  # fmt: skip


if __name__ == "__main__":
    main()
