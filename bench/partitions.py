"""Benchmark: the time-partitioned layout against plain tables (PostgreSQL, run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_partitions \\
        python bench/partitions.py --retained 500000

For each layout, on the same database emptied in between:
  * fills the tables with ``--retained`` completed jobs finished over the last five days,
    and one event each (``bench/enqueue.py``'s ``retain``);
  * partitioned layout only: the time ``ojs_partition --enable`` takes (the tables are
    locked that long);
  * single enqueue, fetch(100) + one ack per job, and fetch(100) + one ack of all 100
    (a worker's completer) throughput with those rows in place;
  * retention at one day: the time and WAL one reaper prune takes to remove the four
    expired days, by row batches (plain) or by dropping partitions (partitioned).
Figures are reported in docs/how-to/partition-the-job-tables.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.enqueue import bench_bulk, bench_fetch_ack, bench_single, retain, setup


def wal_bytes_since(lsn: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn])
        return int(cursor.fetchone()[0])


def lsn() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        return str(cursor.fetchone()[0])


def use_database(name: str) -> None:
    """Point Django at a new, migrated database ``name`` (dropped first if it exists)."""
    import psycopg
    from django.core.management import call_command
    from django.db import connection

    connection.close()
    server = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    with psycopg.connect(server + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    connection.settings_dict["NAME"] = name
    call_command("migrate", verbosity=0)


def run(layout: str, retained: int, single: int, fetch: int) -> dict[str, float]:
    from django.conf import settings

    from django_ojs import lifecycle, reaper

    use_database(f"{os.environ['DATABASE_URL'].rsplit('/', 1)[1]}_{layout}")
    out: dict[str, float] = {}
    start = time.perf_counter()
    retain(retained)
    out["fill s"] = time.perf_counter() - start
    if layout == "partitioned":
        start = time.perf_counter()
        lifecycle.partition_tables(["jobs", "events"], interval="day", premake=3)
        out["enable s (tables locked)"] = time.perf_counter() - start
    out["single enqueue /s"] = bench_single(single)
    bench_bulk(fetch, 1000)
    out["fetch(100)+ack /s"] = bench_fetch_ack(fetch)
    bench_bulk(fetch, 1000)
    out["fetch(100)+ack_many /s"] = bench_fetch_ack(fetch, batched=True)
    settings.OJS_RETENTION = {"completed": 86400, "events": 86400}
    mark = lsn()
    start = time.perf_counter()
    pruned: dict[str, int] = {}
    while True:  # one reaper pass deletes at most 100,000 rows of a kind: loop to the end
        done = reaper.prune_expired()
        for kind, n in done.items():
            pruned[kind] = pruned.get(kind, 0) + n
        if not any(n for kind, n in done.items() if not kind.startswith("partitions_created")):
            break
    out["prune s"] = time.perf_counter() - start
    out["prune WAL MB"] = wal_bytes_since(mark) / 1e6
    out["rows deleted"] = pruned.get("completed", 0) + pruned.get("events", 0)
    out["partitions dropped"] = pruned.get("partitions_dropped", 0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--retained", type=int, default=500_000)
    parser.add_argument("--single", type=int, default=3000)
    parser.add_argument("--fetch", type=int, default=5000)
    args = parser.parse_args()
    setup()
    results = {
        layout: run(layout, args.retained, args.single, args.fetch)
        for layout in ("plain", "partitioned")
    }
    names = list(dict.fromkeys(k for r in results.values() for k in r))
    print(f"retained: {args.retained:,} completed jobs + {args.retained:,} events")
    print(f"{'':28s} {'plain':>12s} {'partitioned':>12s}")
    for name in names:
        cells = [results[layout].get(name) for layout in ("plain", "partitioned")]
        print(
            f"{name:28s} "
            + " ".join(f"{c:>12,.2f}" if c is not None else f"{'-':>12s}" for c in cells)
        )


if __name__ == "__main__":
    main()
