"""Benchmark: the fair claim designs of docs/explanation/fair-scheduling.md, side by side
(PostgreSQL, run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_alternatives \
        python bench/tenants_alternatives.py

Fills one queue with 1,000,000 available jobs of 10,000 tenants (``bench/tenants.py``'s
``fill``) and a ``(queue, tenant, served_at)`` table for the designs that need one, then
times 300 runs of each design's selecting statement (inside a rolled-back transaction),
and 500 single pushes with and without a tenant. Only the first design is django-ojs's;
the others are written here to be measured.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_alternatives")

from bench.enqueue import reset, setup  # noqa: E402


def main() -> None:
    setup()
    from django.db import connection, transaction

    import django_ojs
    from bench.tenants import fill, pct

    reset()
    t0 = time.perf_counter()
    fill(1_000_000, "many", 10_000)
    print(f"filled in {time.perf_counter() - t0:.0f} s", flush=True)
    with connection.cursor() as c:
        c.execute("DROP TABLE IF EXISTS alt_cursor")
        c.execute(
            "CREATE TABLE alt_cursor (queue text, tenant text, served_at bigint, PRIMARY KEY (queue, tenant))"
        )
        c.execute(
            "INSERT INTO alt_cursor SELECT 'many', 't' || i, (random() * 1e9)::bigint FROM generate_series(0, 9999) i"
        )
        c.execute("CREATE INDEX ON alt_cursor (queue, served_at)")
        c.execute("ANALYZE alt_cursor")

    Q = {
        "chosen: walk ojs_job_claim_idx by (priority, vtime, id)": "SELECT id FROM ojs_job WHERE state='available' AND queue='many' AND rate_key IS NULL "
        "ORDER BY priority DESC, vtime, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        "cursor table + LATERAL: least recently served tenant's oldest job, cursor updated": "WITH c AS (SELECT tenant FROM alt_cursor WHERE queue='many' ORDER BY served_at LIMIT 10), "
        "j AS (SELECT x.id, c.tenant FROM c CROSS JOIN LATERAL (SELECT id FROM ojs_job WHERE state='available' "
        "AND queue='many' AND tenant=c.tenant AND tenant<>'' ORDER BY priority DESC, vtime, id LIMIT 1 "
        "FOR UPDATE SKIP LOCKED) x LIMIT 1), "
        "u AS (UPDATE alt_cursor SET served_at = served_at + 1000000000 WHERE queue='many' AND tenant IN (SELECT tenant FROM j)) "
        "SELECT id FROM j",
        "recursive skip scan: every tenant with jobs, then the least recently served": "WITH RECURSIVE t(tenant) AS ((SELECT tenant FROM ojs_job WHERE state='available' AND queue='many' AND tenant<>'' "
        "ORDER BY tenant LIMIT 1) UNION ALL SELECT (SELECT j.tenant FROM ojs_job j WHERE j.state='available' AND j.queue='many' "
        "AND j.tenant > t.tenant AND j.tenant<>'' ORDER BY j.tenant LIMIT 1) FROM t WHERE t.tenant IS NOT NULL), "
        "pick AS (SELECT t.tenant FROM t JOIN alt_cursor c ON c.queue='many' AND c.tenant=t.tenant ORDER BY c.served_at LIMIT 1) "
        "SELECT id FROM ojs_job WHERE state='available' AND queue='many' AND tenant=(SELECT tenant FROM pick) AND tenant<>'' "
        "ORDER BY priority DESC, vtime, id LIMIT 1 FOR UPDATE SKIP LOCKED",
        "rotation by name: next tenant after the queue's last one (one probe, cursor row updated)": "WITH j AS (SELECT id, tenant FROM ojs_job WHERE state='available' AND queue='many' AND tenant > 't5000' AND tenant<>'' "
        "ORDER BY tenant, priority DESC, vtime, id LIMIT 1 FOR UPDATE SKIP LOCKED), "
        "u AS (UPDATE alt_cursor SET served_at = 0 WHERE queue='many' AND tenant = (SELECT tenant FROM j)) SELECT id FROM j",
    }
    for name, sql in Q.items():
        took = []
        for _ in range(300):
            with transaction.atomic():
                with connection.cursor() as c:
                    s = time.perf_counter()
                    c.execute(sql)
                    row = c.fetchone()
                    took.append((time.perf_counter() - s) * 1000)
                    assert row is not None
                transaction.set_rollback(True)
        print(f"{name}: p50 {pct(took, 50):.3f} ms, p99 {pct(took, 99):.3f} ms", flush=True)

    for label, meta in (("push, no tenant", {}), ("push, a tenant's", {"tenant_id": "t42"})):
        took = []
        for i in range(500):
            s = time.perf_counter()
            django_ojs.enqueue("bench.push", [i], queue="many", meta=meta)
            took.append((time.perf_counter() - s) * 1000)
        print(
            f"{label} (1,000,000 waiting): p50 {pct(took, 50):.3f} ms, p99 {pct(took, 99):.3f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
