"""How many PostgreSQL connections each django-ojs process holds (run by hand).

    python bench/connections.py    # DATABASE_URL / JOBS_DATABASE_URL: see below

The processes run ``tests/acceptance/twodb_settings.py``: ``default`` is ``DATABASE_URL``
(default ``.../ojs_bench_conn``), the jobs are in ``JOBS_DATABASE_URL`` (default
``.../ojs_bench_conn_jobs``), and every connection carries ``application_name``
``ojs-test-<pid>``. For each process kind it starts one process, lets it idle for
``--idle`` (6) seconds (a ``wait()`` waits), then (workers) drains ``--jobs`` (3,000) short jobs (``test.slow``, 20 ms), sampling
``pg_stat_activity`` every 50 ms, and prints the most connections seen at once per
database and how many of them were ``LISTEN``\\ ing. Figures are in
docs/how-to/run-at-scale.md ("Connections per process").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SERVER = os.environ.get("PG_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
os.environ.setdefault("DATABASE_URL", f"{SERVER}/ojs_bench_conn")
os.environ.setdefault("JOBS_DATABASE_URL", f"{SERVER}/ojs_bench_conn_jobs")
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.acceptance.twodb_settings"

#: name -> manage.py command line.
KINDS = {
    "ojs_worker (threads, 10)": ["ojs_worker", "--concurrency", "10"],
    "ojs_worker (threads, 50)": ["ojs_worker", "--concurrency", "50"],
    "ojs_worker (threads, 10, --no-reaper)": ["ojs_worker", "--concurrency", "10", "--no-reaper"],
    "ojs_worker (processes, 4)": ["ojs_worker", "--execution", "processes", "--concurrency", "4"],
    "ojs_reaper": ["ojs_reaper"],
    # A process inside django_ojs.wait() for a job nobody runs.
    "django_ojs.wait()": [
        "shell", "-c",
        "import django_ojs\n"
        "job = django_ojs.enqueue('test.noop', queue='nobody')\n"
        "try:\n    django_ojs.wait(job.id, timeout=30)\nexcept django_ojs.OJSError:\n    pass",
    ],
}  # fmt: skip


def create_databases() -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for url in (os.environ["DATABASE_URL"], os.environ["JOBS_DATABASE_URL"]):
            name = url.rsplit("/", 1)[1]
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')


def held(observer: psycopg.Connection, mine: str) -> tuple[Counter[str], int]:
    """Connections of the benchmarked processes now: per database, and LISTENing ones."""
    databases = [os.environ[n].rsplit("/", 1)[1] for n in ("DATABASE_URL", "JOBS_DATABASE_URL")]
    rows = observer.execute(
        "SELECT datname, query FROM pg_stat_activity WHERE datname = ANY(%s) "
        "AND application_name LIKE 'ojs-test-%%' AND application_name <> %s",
        [databases, mine],
    ).fetchall()
    return Counter(r[0] for r in rows), sum(1 for r in rows if r[1].startswith("LISTEN"))


def measure(argv: list[str], jobs: int, idle: float, observer: psycopg.Connection) -> str:
    import django_ojs
    from django_ojs.models import Job, Worker

    Job.objects.all().delete()
    env = {**os.environ, "OJS_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *argv], cwd=ROOT, env=env)
    mine = f"ojs-test-{os.getpid()}"
    try:
        deadline = time.monotonic() + 60
        if argv[0] == "ojs_worker":
            while not Worker.objects.filter(pid=process.pid).exists():
                if time.monotonic() > deadline:
                    raise SystemExit(f"{argv} did not start")
                time.sleep(0.05)
        time.sleep(idle)
        idle_counts, idle_listen = held(observer, mine)
        peak: Counter[str] = Counter()
        peak_listen = 0
        if argv[0] == "ojs_worker":
            django_ojs.enqueue_many(
                [{"type": "test.slow", "args": [{"duration_ms": 20}]} for _ in range(jobs)]
            )
            deadline = time.monotonic() + 300
            while Job.objects.filter(state="completed").count() < jobs:
                counts, listen = held(observer, mine)
                peak = Counter({k: max(peak[k], counts[k]) for k in {*peak, *counts}})
                peak_listen = max(peak_listen, listen)
                if time.monotonic() > deadline:
                    raise SystemExit(f"{argv} did not drain {jobs} jobs")
                time.sleep(0.05)
        line = f"idle {dict(idle_counts)} (LISTEN {idle_listen})"
        if argv[0] == "ojs_worker":
            line += f"; draining {dict(peak)} (LISTEN {peak_listen})"
        return line
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--idle", type=float, default=6.0)
    args = parser.parse_args()
    create_databases()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("migrate", database="jobs", verbosity=0)
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as observer:
        for name, argv in KINDS.items():
            print(f"{name}: {measure(argv, args.jobs, args.idle, observer)}", flush=True)


if __name__ == "__main__":
    main()
