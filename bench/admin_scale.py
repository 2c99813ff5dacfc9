"""Benchmark: the admin console and the admin API on a job table of a million rows (by hand).

    python bench/admin_scale.py                      # 1,000,000 jobs and 1,000,000 events
    python bench/admin_scale.py --jobs 100000        # smaller
    python bench/admin_scale.py --keep               # reuse the filled database
    python bench/admin_scale.py --keep --search-index  # with the optional GIN indexes

PostgreSQL only (``DATABASE_URL``, default ``.../ojs_bench_admin``). Fills the tables with
SQL (``generate_series``: finished jobs in mixed states, queues, types, errors and args;
events over the last days), ANALYZEs them, then times each page in-process (Django's
test client, logged in as a superuser): one warm-up, then the median of 5 requests.
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
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/ojs_bench_admin")
os.environ.setdefault("OJS_API_AUTH", "none")

from bench.enqueue import setup  # after the environment above

#: Column → SQL expression of ``g`` (1..N) for the generated jobs; other columns copy a
#: template job's value.
JOB_COLUMNS = {
    "id": "gen_random_uuid()",
    "state": "(ARRAY['completed','completed','completed','discarded','cancelled'])[1 + g % 5]",
    "queue": "'q' || (g % 10)",
    "type": "(ARRAY['email.send','report.build','sms.send','image.resize'])[1 + g % 4]",
    "args": "jsonb_build_array(jsonb_build_object('order_id', g, 'customer', g % 1000))",
    "created_at": "now() - make_interval(secs => g)",
    "enqueued_at": "now() - make_interval(secs => g)",
    "started_at": "now() - make_interval(secs => g) + interval '1 second'",
    "completed_at": "CASE WHEN g % 5 < 3 THEN now() - make_interval(secs => g) + interval '2 seconds' END",
    "discarded_at": "CASE WHEN g % 5 = 3 THEN now() - make_interval(secs => g) + interval '2 seconds' END",
    "cancelled_at": "CASE WHEN g % 5 = 4 THEN now() - make_interval(secs => g) + interval '2 seconds' END",
    "dead_letter": "g % 5 = 3",
    "error": "CASE WHEN g % 5 = 3 THEN '{\"type\": \"SMTPError\", \"message\": \"refused\"}'::jsonb END",
    "attempt": "1",
    "worker_id": "'worker-' || (g % 20)",
}  # fmt: skip


def fill(jobs: int, events: int) -> None:
    from django.db import connection

    import django_ojs

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE ojs_job, ojs_event")
    template = django_ojs.enqueue("bench.template", [0])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ojs_job'"
        )
        columns = [row[0] for row in cursor.fetchall()]
        # The expressions use %, the modulo operator: doubled for the driver's placeholders.
        select = ", ".join(JOB_COLUMNS.get(c, f't."{c}"').replace("%", "%%") for c in columns)
        started = time.perf_counter()
        cursor.execute(
            f"INSERT INTO ojs_job ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in columns)}) "
            f"SELECT {select} FROM generate_series(1, %s) g, "
            f"(SELECT * FROM ojs_job WHERE id = %s) t",
            [jobs, template.id],
        )
        cursor.execute("DELETE FROM ojs_job WHERE id = %s", [template.id])
        cursor.execute(
            "INSERT INTO ojs_event (id, type, source, subject, time, job_id, queue, data) "
            "SELECT gen_random_uuid(), (ARRAY['job.enqueued','job.started','job.completed',"
            "'job.failed'])[1 + g %% 4], 'bench', '', now() - make_interval(secs => g / 4), "
            "NULL, 'q' || (g %% 10), '{}'::jsonb FROM generate_series(1, %s) g",
            [events],
        )
        cursor.execute("ANALYZE ojs_job")
        cursor.execute("ANALYZE ojs_event")
    print(f"filled {jobs:,} jobs and {events:,} events in {time.perf_counter() - started:.1f} s")


PAGES = [
    ("admin index", "admin:index", {}),
    ("dashboard", "admin:ojs_dashboard_changelist", {}),
    ("dashboard, live refresh", "admin:ojs_dashboard_changelist", {"live": "1"}),
    ("job list", "admin:ojs_job_changelist", {}),
    ("job list, state=discarded", "admin:ojs_job_changelist", {"state__exact": "discarded"}),
    ("job list, queue=q3", "admin:ojs_job_changelist", {"queue__exact": "q3"}),
    ("job list, type=sms.send", "admin:ojs_job_changelist", {"type__exact": "sms.send"}),
    ("job list, search args", "admin:ojs_job_changelist", {"q": 'args:[{"order_id": 4242}]'}),
    ("job list, page 100", "admin:ojs_job_changelist", {"p": "100"}),
    ("dead letter", "admin:ojs_deadletterjob_changelist", {}),
    ("workers", "admin:ojs_worker_changelist", {}),
    ("queues", "admin:ojs_queue_changelist", {}),
    ("admin API: stats", "/ojs/v1/admin/stats", {}),
    ("admin API: jobs, type=email.*", "/ojs/v1/admin/jobs", {"type": "email.*"}),
]


def timed(client, url: str, query: dict, runs: int) -> float:
    client.get(url, query)  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        response = client.get(url, query)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="do not refill the tables")
    parser.add_argument(
        "--search-index",
        action="store_true",
        help="build the optional GIN indexes on args/meta first (else drop them)",
    )
    args = parser.parse_args()
    setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    if not args.keep:
        fill(args.jobs, args.events if args.events is not None else args.jobs)
    start = time.perf_counter()
    call_command("ojs_search_index", create=args.search_index, drop=not args.search_index)
    if args.search_index:
        print(f"(GIN indexes built in {time.perf_counter() - start:.1f} s)")
    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    # A job's page: one of the million.
    from django_ojs.models import Job

    one = Job.objects.order_by("-id").values_list("pk", flat=True).first()
    pages = [*PAGES, ("a job's page", "admin:ojs_job_change", {"__pk": one})]
    print(f"{'page':38} {'median ms':>10}")
    for label, name, query in pages:
        query = dict(query)
        pk = query.pop("__pk", None)
        url = name if name.startswith("/") else reverse(name, args=[pk] if pk else [])
        print(f"{label:38} {timed(client, url, query, args.runs):10.1f}")


if __name__ == "__main__":
    main()
