"""Benchmark: enqueue, bulk enqueue and fetch+ack throughput on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench python bench/enqueue.py

Creates/migrates the database, empties the job tables, and prints jobs/s for:
  * single ``enqueue`` each in its own transaction,
  * ``enqueue_many`` in batches,
  * ``fetch(count=100)`` followed by one ``ack`` per job.
Figures are reported in docs/explanation/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench")


def setup() -> None:
    import django
    import psycopg

    url = os.environ["DATABASE_URL"]
    if url.startswith("postgres"):
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{name}"')
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def reset() -> None:
    from django.db import connection

    from django_ojs.models import Event, Job, Queue, Worker

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE ojs_job, ojs_event, ojs_worker, ojs_queue")
            cursor.execute("VACUUM ANALYZE ojs_job")
    else:
        for model in (Job, Event, Worker, Queue):
            model.objects.all().delete()


def retain(n: int) -> None:
    """Fill the tables with ``n`` finished jobs and ``n`` events, as a busy site retains them
    (PostgreSQL; "flat at scale" runs): completed ``bench.retained`` jobs finished over the
    last five days (inside the default 7-day retention, so the reaper keeps them), ids
    that are UUIDv7 of their own time, and one ``job.completed`` event each. Analyzed
    afterwards, as autovacuum would have done on a live table."""
    from django.db import connection

    from django_ojs.drivers.postgresql.statements import UUID7_SQL

    if not n:
        return
    uuid_at = UUID7_SQL.replace("clock_timestamp()", "t.at")
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO ojs_job (id, type, queue, args, meta, priority, state, attempt,
                max_attempts, tags, extra, errors, dead_letter, awaited, created_at,
                enqueued_at, started_at, completed_at, worker_id)
            SELECT {uuid_at}, 'bench.retained', 'default', jsonb_build_array(t.g), '{{}}', 0,
                'completed', 1, 3, '[]', '{{}}', '[]', false, false, t.at, t.at,
                t.at + interval '1 ms', t.at + interval '2 ms', 'bench-retained'
            FROM (SELECT g, now() - interval '5 days' * (g::float8 / %(n)s) AS at
                  FROM generate_series(1, %(n)s) AS g) AS t
            """,
            {"n": n},
        )
        cursor.execute(
            """
            INSERT INTO ojs_event (id, type, source, subject, time, job_id, queue, data)
            SELECT gen_random_uuid(), 'job.completed', 'ojs://bench', id::text, completed_at,
                id, queue, jsonb_build_object('job_id', id::text, 'job_type', type)
            FROM ojs_job WHERE type = 'bench.retained' ORDER BY completed_at
            """
        )
        cursor.execute("VACUUM ANALYZE ojs_job")
        cursor.execute("VACUUM ANALYZE ojs_event")


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("inf")


def bench_single(n: int) -> float:
    import django_ojs

    start = time.perf_counter()
    for i in range(n):
        django_ojs.enqueue("bench.noop", [i])  # autocommit: each in its own transaction
    return rate(n, time.perf_counter() - start)


def bench_bulk(n: int, batch: int) -> float:
    import django_ojs

    jobs = [{"type": "bench.noop", "args": [i]} for i in range(n)]
    start = time.perf_counter()
    for i in range(0, n, batch):
        django_ojs.enqueue_many(jobs[i : i + batch])
    return rate(n, time.perf_counter() - start)


def bench_fetch_ack(n: int, *, batched: bool = False) -> float:
    """Claims of 100, then one ``ack`` per job, or (``batched``) one ``ack_many`` of the
    100, as a worker's completer does."""
    from django_ojs import lifecycle

    done = 0
    start = time.perf_counter()
    while done < n:
        jobs = lifecycle.fetch(["default"], count=100, worker_id="bench")
        if not jobs:
            break
        if batched:
            lifecycle.ack_many([(job.id, job.attempt, None) for job in jobs], worker_id="bench")
        else:
            for job in jobs:
                lifecycle.ack(job.id, None, worker_id="bench")
        done += len(jobs)
    return rate(done, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--single", type=int, default=5000)
    parser.add_argument("--bulk", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--fetch", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-events", action="store_true", help="OJS_STORE_EVENTS = False")
    args = parser.parse_args()
    setup()
    from django.conf import settings
    from django.db import connection

    if args.no_events:
        settings.OJS_STORE_EVENTS = False
    print(f"database: {connection.vendor}, events stored: {not args.no_events}, runs: {args.runs}")
    results: dict[str, list[float]] = {
        "single enqueue": [],
        "enqueue_many": [],
        "fetch(100)+ack": [],
    }
    for _ in range(args.runs):
        reset()
        results["single enqueue"].append(bench_single(args.single))
        reset()
        results["enqueue_many"].append(bench_bulk(args.bulk, args.batch))
        reset()
        bench_bulk(args.fetch, args.batch)
        results["fetch(100)+ack"].append(bench_fetch_ack(args.fetch))
    for name, values in results.items():
        print(
            f"{name:16s} median {statistics.median(values):>10,.0f} jobs/s"
            f"   (runs: {', '.join(f'{v:,.0f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
