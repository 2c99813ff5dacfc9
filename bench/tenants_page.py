"""Benchmark: the tenants page and ``GET /admin/tenants`` on a million jobs (run by hand).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ojs_bench_tenants_page \\
        python bench/tenants_page.py                    # 1,000,000 jobs, 10,000 tenants
    python bench/tenants_page.py --keep                 # reuse the filled database

PostgreSQL only. Fills ``ojs_job`` with SQL (``generate_series``): ``--jobs`` jobs over
``--tenants`` tenants (``t00000``...) in 10 queues, each tenant's jobs in every state
(available, completed, running, scheduled, retryable, pending, discarded, cancelled),
plus ``--whale`` more available jobs of one tenant on the first page (``t00050``), then
VACUUM ANALYZE as autovacuum would. Times each page in-process (Django's test client,
a superuser): one warm-up, then the median of ``--runs`` requests. Figures are reported
in docs/how-to/run-jobs-for-tenants.md.
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
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_tenants_page")
os.environ.setdefault("OJS_API_AUTH", "none")

from bench.enqueue import reset, setup  # after the environment above

STATES = ("available", "available", "completed", "completed", "active", "scheduled",
          "retryable", "pending", "discarded", "cancelled")  # fmt: skip
WHALE = "t00050"


def fill(jobs: int, tenants: int, whale: int) -> None:
    """``jobs`` jobs over ``tenants`` tenants (the k-th job of tenant i is job
    ``k * tenants + i``, in state ``STATES[k % 10]``), then ``whale`` available jobs of
    ``WHALE``; the queue rows a push would have registered."""
    from django.db import connection

    import django_ojs

    reset()
    template = django_ojs.enqueue("bench.template", [0])
    states = "ARRAY[" + ",".join(f"'{s}'" for s in STATES) + "]"
    expressions = {
        "id": "gen_random_uuid()",
        "tenant": f"'t' || lpad((g %% {tenants})::text, 5, '0')",
        "state": f"({states})[1 + (g / {tenants}) %% 10]",
        "queue": "'q' || (g %% 10)",
        "vtime": f"(g / {tenants} + 1)::float8",
        # Pushed in order: a tenant's k-th job is newer and later in its turns (vtime).
        "created_at": f"now() - make_interval(secs => {jobs} - g)",
        "enqueued_at": f"now() - make_interval(secs => {jobs} - g)",
        "scheduled_at": f"CASE WHEN ({states})[1 + (g / {tenants}) %% 10] = 'scheduled' "
        "THEN now() + interval '1 hour' END",
        "args": "jsonb_build_array(g)",
    }
    whale_expressions = {**expressions, "tenant": f"'{WHALE}'", "state": "'available'",
                         "scheduled_at": "NULL", "vtime": "(g + 1000)::float8",
                         "created_at": f"now() - make_interval(secs => {whale} - g)",
                         "enqueued_at": f"now() - make_interval(secs => {whale} - g)"}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ojs_job'"
        )
        columns = [row[0] for row in cursor.fetchall()]
        names = ", ".join(f'"{c}"' for c in columns)
        started = time.perf_counter()
        for exprs, n in ((expressions, jobs), (whale_expressions, whale)):
            if not n:
                continue
            select = ", ".join(exprs.get(c, f't."{c}"') for c in columns)
            cursor.execute(
                f"INSERT INTO ojs_job ({names}) SELECT {select} "
                f"FROM generate_series(0, %s) g, (SELECT * FROM ojs_job WHERE id = %s) t",
                [n - 1, template.id],
            )
        cursor.execute("DELETE FROM ojs_job WHERE id = %s", [template.id])
        cursor.execute(
            "INSERT INTO ojs_queue (name, paused, created_at) "
            "SELECT 'q' || i, false, now() FROM generate_series(0, 9) i "
            "ON CONFLICT (name) DO NOTHING"
        )
        cursor.execute("VACUUM ANALYZE ojs_job")
    print(
        f"filled {jobs:,} jobs of {tenants:,} tenants and {whale:,} of {WHALE} "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )


def timed(client, url: str, query: dict, runs: int) -> float:
    client.get(url, query)  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        response = client.get(url, query)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return statistics.median(samples)


def buffers(after: str) -> None:
    """What the page's two statements read for the page after ``after`` (EXPLAIN
    ANALYZE BUFFERS): index pages touched, whatever the machine's load."""
    from django.db import connection, transaction

    from django_ojs import lifecycle
    from django_ojs.drivers.postgresql.driver import _TENANT_HEADS_SQL
    from django_ojs.drivers.postgresql.statements import TENANT_COUNTS_SQL
    from django_ojs.states import JobState

    ids = lifecycle.tenant_ids(after=after, limit=100)
    states = [s.value for s in JobState]
    cap = lifecycle.PAGE_EXACT_COUNT_UP_TO + 1
    for label, sql, params in (
        ("counts", TENANT_COUNTS_SQL, {"tenants": ids, "states": states, "cap": cap}),
        ("oldest waiting", _TENANT_HEADS_SQL, {"tenants": ids}),
    ):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
            (plan,) = cursor.fetchone()
        top = plan[0] if isinstance(plan, list) else plan
        hits = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
        print(
            f"  page after {after or '(start)'!r:10} {label:15} {top['Execution Time']:7.1f} ms "
            f"in the server, {hits:,} buffers",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--whale", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="do not refill the table")
    args = parser.parse_args()
    setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    if not args.keep:
        fill(args.jobs, args.tenants, args.whale)
    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    page = reverse("admin:ojs_tenant_changelist")
    middle = f"t{args.tenants // 2:05d}"
    last = f"t{max(0, args.tenants - 50):05d}"
    cases = [
        ("admin tenants page, first (with the whale)", page, {}),
        ("admin tenants page, middle", page, {"after": middle}),
        ("admin tenants page, last", page, {"after": last}),
        ("GET /admin/tenants (100)", "/ojs/v1/admin/tenants", {}),
        ("GET /admin/tenants?limit=500", "/ojs/v1/admin/tenants", {"limit": "500"}),
        ("GET /admin/tenants/{whale}/stats", f"/ojs/v1/admin/tenants/{WHALE}/stats", {}),
        ("GET /admin/tenants/{one}/stats", f"/ojs/v1/admin/tenants/{middle}/stats", {}),
    ]
    print("the page's statements (100 tenants):")
    buffers("")
    buffers(middle)
    print(f"{'page':46} {'median ms':>10}")
    for label, url, query in cases:
        print(f"{label:46} {timed(client, url, query, args.runs):10.1f}", flush=True)


if __name__ == "__main__":
    main()
