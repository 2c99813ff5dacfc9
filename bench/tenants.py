"""Benchmark: fair claims between tenants on PostgreSQL (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_tenants python bench/tenants.py

Two parts (``--part noisy``, ``--part claims``, or both, the default):

**noisy**: tenant ``a`` enqueues ``--a`` jobs (100,000), ``--workers`` ``manage.py
ojs_worker`` processes (2) start draining them, and once they have run for a second
tenants ``b`` to ``k`` enqueue ``--others`` jobs each (100), one push per tenant. Reported:
the start latency of b..k's jobs (``started_at - created_at``: p50, p99, max) and a's
drain rate (a's jobs per second, first start to last completion), with fair claims and
then without (``OJS_TENANT_FAIRNESS = False``), for contrast. Jobs are ``test.noop``.

**claims**: ``--jobs`` available jobs (1,000,000) spread over ``--tenants`` tenants
(10,000) in one queue, then ``--claims`` claims of one job (and of 10), each timed in this
process (``lifecycle.fetch``, the statement every worker runs): p50 and p99 for the
tenants' jobs, for the same number of jobs of one tenant, and of no tenant. The rows are
written by one ``INSERT … SELECT`` (turns as a tenant's pushes give them: its k-th job
waits at ``vtime`` k), then analysed, as autovacuum would.

``OJS_BENCH_ROOT`` runs the claims part of another checkout (another branch's code, for
"as fast as before"): only the jobs of no tenant are measured when its jobs have no
``tenant`` column.

Figures are reported in docs/explanation/fair-scheduling.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(os.environ.get("OJS_BENCH_ROOT") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_tenants")

from bench.enqueue import reset, setup  # noqa: E402

OTHERS = "bcdefghijk"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# ----------------------------------------------------------------------------- noisy


def enqueue(tenant: str, n: int) -> None:
    import django_ojs

    batch = 5000
    for start in range(0, n, batch):
        django_ojs.enqueue_many(
            [
                {"type": "test.noop", "args": [tenant, i], "meta": {"tenant_id": tenant}}
                for i in range(start, min(n, start + batch))
            ]
        )


def waiting() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ojs_job WHERE state IN ('available', 'active')")
        return int(cursor.fetchone()[0])


def started_any() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM ojs_job WHERE started_at IS NOT NULL LIMIT 1")
        return cursor.fetchone() is not None


def noisy(n_a: int, others: int, workers: int, concurrency: int, fair: bool) -> dict[str, float]:
    from django.db import connection
    from django.test import override_settings

    reset()
    with override_settings(OJS_TENANT_FAIRNESS=fair):
        enqueue("a", n_a)
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE ojs_job")
        env = {**os.environ, "OJS_LOG_LEVEL": "WARNING"}
        cmd = [sys.executable, str(ROOT / "manage.py"), "ojs_worker",
               "--concurrency", str(concurrency)]  # fmt: skip
        procs = [subprocess.Popen(cmd, cwd=ROOT, env=env) for _ in range(workers)]
        try:
            deadline = time.monotonic() + 120
            while not started_any() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)  # a's drain is under way
            for tenant in OTHERS:
                enqueue(tenant, others)
            deadline = time.monotonic() + 900
            while waiting() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=60)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM started_at - created_at) FROM ojs_job "
            "WHERE tenant <> 'a' AND started_at IS NOT NULL"
        )
        latency = [float(row[0]) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT count(*), extract(epoch FROM max(completed_at) - min(started_at)) "
            "FROM ojs_job WHERE tenant = 'a' AND state = 'completed'"
        )
        done_a, span_a = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM ojs_job WHERE state = 'completed'")
        (done,) = cursor.fetchone()
    assert done == n_a + others * len(OTHERS), f"only {done} completed"
    return {
        "p50": pct(latency, 50),
        "p99": pct(latency, 99),
        "max": max(latency),
        "a_rate": int(done_a) / float(span_a),
    }


# ---------------------------------------------------------------------------- claims


def fill(n: int, queue: str, tenants: int) -> None:
    """``n`` available jobs of ``queue`` in one statement: of no tenant (``queue``
    "none"), of one ("one"; its k-th job at vtime k) or of ``tenants`` tenants taking
    turns as their pushes give them (each one's k-th job at vtime k)."""
    from django.db import connection

    from django_ojs.envelope import JobSpec
    from django_ojs.lifecycle.rows import job_row
    from django_ojs.models import Job

    template = job_row(JobSpec(type="bench.claim", queue=queue), _now(), 3)
    expressions = {
        # UUIDv7-shaped, ascending with the row number.
        "id": "(lpad(to_hex(%(ms)s::bigint + i / 1000), 12, '0') || '70008000'"
        " || lpad(to_hex(i), 12, '0'))::uuid",
        "args": "jsonb_build_array(i)",
    }
    if queue == "one":
        expressions.update(tenant="'solo'", vtime="(i + 1)::float8")
    elif queue == "many":
        expressions.update(
            tenant="'t' || (i %% %(tenants)s)", vtime="(i / %(tenants)s + 1)::float8"
        )
    columns, values = [], []
    params: dict[str, object] = {"ms": int(time.time() * 1000) - n, "tenants": tenants}
    for field in Job._meta.concrete_fields:
        columns.append(f'"{field.column}"')
        if field.attname in expressions:
            values.append(expressions[field.attname])
        else:
            values.append(f"%({field.attname})s")
            params[field.attname] = field.get_db_prep_save(
                getattr(template, field.attname), connection
            )
    sql = (
        f"INSERT INTO ojs_job ({', '.join(columns)}) SELECT {', '.join(values)} "
        f"FROM generate_series(0, {int(n) - 1}) AS i"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        cursor.execute(
            "INSERT INTO ojs_queue (name, paused, created_at) VALUES (%s, false, now()) "
            "ON CONFLICT (name) DO NOTHING",
            [queue],
        )
        cursor.execute("VACUUM ANALYZE ojs_job")


def _now():
    from django.utils import timezone

    return timezone.now()


def claims(queue: str, count: int, times: int) -> tuple[float, float]:
    from django_ojs import lifecycle

    fetch = lifecycle.Fetch([queue], worker_id="bench-claims", register=False)
    took = []
    for _ in range(times):
        start = time.perf_counter()
        got = fetch(count)
        took.append((time.perf_counter() - start) * 1000)
        assert len(got) == count, f"claimed {len(got)} of {count}"
    return pct(took, 50), pct(took, 99)


def claims_part(n: int, tenants: int, times: int) -> None:
    from django_ojs.models import Job

    has_tenants = any(f.attname == "tenant" for f in Job._meta.concrete_fields)
    cases = [("none", 0)]
    if has_tenants:
        cases += [("one", 0), ("many", tenants)]
    for queue, spread in cases:
        reset()
        started = time.perf_counter()
        fill(n, queue, spread)
        filled = time.perf_counter() - started
        one50, one99 = claims(queue, 1, times)
        ten50, ten99 = claims(queue, 10, max(1, times // 5))
        label = {"none": "no tenant", "one": "one tenant", "many": f"{tenants:,} tenants"}[queue]
        print(
            f"{n:>9,} jobs, {label:>15}: claim of 1 p50 {one50:.3f} ms p99 {one99:.3f} ms; "
            f"claim of 10 p50 {ten50:.3f} ms p99 {ten99:.3f} ms (filled in {filled:.0f} s)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["noisy", "claims", "both"], default="both")
    parser.add_argument("--a", type=int, default=100_000, help="tenant a's jobs")
    parser.add_argument("--others", type=int, default=100, help="jobs of each of b..k")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    setup()
    print(f"{os.cpu_count()} CPUs", flush=True)
    if args.part in ("noisy", "both"):
        for fair in (True, False):
            r = noisy(args.a, args.others, args.workers, args.concurrency, fair)
            print(
                f"{'fair' if fair else 'unfair':>6}: a={args.a:,}, b..k={args.others} each, "
                f"{args.workers} workers x {args.concurrency}: b..k start latency p50 "
                f"{r['p50']:.3f} s, p99 {r['p99']:.3f} s, max {r['max']:.3f} s; "
                f"a drains at {r['a_rate']:.0f} jobs/s",
                flush=True,
            )
    if args.part in ("claims", "both"):
        claims_part(args.jobs, args.tenants, args.claims)


if __name__ == "__main__":
    main()
