"""Benchmark: the per-tenant metrics' scrape on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_tenants python bench/tenant_metrics.py

``--jobs`` available jobs (1,000,000) over ``--tenants`` tenants (10,000) in one queue
(``bench/tenants.py``'s fill), ``--active`` (2,000) of them made active, then
``--scrapes`` (20) reads of the store's gauges (``StoreCollector.collect``, what
``/ojs/metrics`` runs): p50 and max of a whole scrape, and of the per-tenant part alone.
``--keep`` scrapes the jobs already there. Figures: docs/reference/observability.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_tenants")

from bench.enqueue import reset, setup


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--active", type=int, default=2_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    setup()
    from django.db import connection
    from django.utils import timezone

    from bench.tenants import fill
    from django_ojs import metrics
    from django_ojs.conf import settings

    if not args.keep:
        reset()
        fill(args.jobs, "many", args.tenants)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE ojs_job SET state = 'active', worker_id = 'w' || (random() * 10)::int "
                "WHERE id IN (SELECT id FROM ojs_job ORDER BY random() LIMIT %s)",
                [args.active],
            )
            cursor.execute("VACUUM ANALYZE ojs_job")
    collector = metrics.StoreCollector()
    whole, tenants = [], []
    for _ in range(args.scrapes):
        began = time.perf_counter()
        families = list(collector.collect())
        whole.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        using = settings.DATABASE
        list(collector.tenant_gauges(using, collector.recent_starts(using, timezone.now())))
        tenants.append((time.perf_counter() - began) * 1000)
    series = {f.name: len(f.samples) for f in families if f.name.startswith("ojs_tenant")}
    print(f"{args.jobs:,} jobs, {args.tenants:,} tenants: {series}")
    depth = next(f for f in families if f.name == "ojs_tenant_queue_depth")
    named = sorted(s.value for s in depth.samples if s.labels["tenant_id"] != "_other")
    total = sum(s.value for s in depth.samples)
    print(f"depth: {total:,.0f} in all; named tenants from {named[0]:.0f} to {named[-1]:.0f}")
    print(f"whole scrape p50 {pct(whole, 50):.0f} ms, max {max(whole):.0f} ms")
    print(f"tenant gauges p50 {pct(tenants, 50):.0f} ms, max {max(tenants):.0f} ms")


if __name__ == "__main__":
    main()
