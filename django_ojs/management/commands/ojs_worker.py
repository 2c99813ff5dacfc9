"""``manage.py ojs_worker``: run job handlers (parse flags → ``worker.run``)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import worker
from django_ojs.checks import TAG as CHECKS_TAG
from django_ojs.conf import settings


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class Command(BaseCommand):
    help = "Fetch jobs from OJS queues and run their registered handlers."
    # At start, only django-ojs's own checks (settings, database): every app's checks
    # import the whole site (URL confs, their views, templates), about 0.25 s of the
    # example project's 1.3 s start, for nothing a worker uses. ``manage.py check``
    # (in CI, at deploy) still runs them all.
    requires_system_checks = [CHECKS_TAG]

    def add_arguments(self, parser: CommandParser) -> None:
        s = settings
        parser.add_argument("--queues", type=_csv, default=None,
                            help=f"Comma-separated queues, most important first (default OJS_WORKER_QUEUES = {','.join(s.WORKER_QUEUES)}).")  # fmt: skip
        parser.add_argument("--concurrency", type=int, default=None,
                            help=f"Handlers running at once (default OJS_WORKER_CONCURRENCY = {s.WORKER_CONCURRENCY}).")  # fmt: skip
        parser.add_argument("--pool", default=None, metavar="NAME",
                            help="Join the worker pool NAME and fetch from its queues as its strategy chooses (see the Django admin's worker pools). 'threads' and 'processes' keep their older meaning, that of --execution.")  # fmt: skip
        parser.add_argument("--execution", choices=worker.loop.POOLS, default=None,
                            help=f"Run handlers in threads or child processes (default OJS_WORKER_POOL = {s.WORKER_POOL}).")  # fmt: skip
        parser.add_argument("--poll-interval", type=float, default=None,
                            help=f"Seconds between looks for work without a notification (default OJS_WORKER_POLL_INTERVAL = {s.WORKER_POLL_INTERVAL}).")  # fmt: skip
        parser.add_argument("--heartbeat-interval", type=float, default=None,
                            help=f"Seconds between heartbeats (default OJS_WORKER_HEARTBEAT_INTERVAL = {s.WORKER_HEARTBEAT_INTERVAL}).")  # fmt: skip
        parser.add_argument("--shutdown-grace-period", type=float, default=None,
                            help=f"Seconds to let running jobs finish after SIGTERM (default OJS_SHUTDOWN_GRACE_PERIOD = {s.SHUTDOWN_GRACE_PERIOD}).")  # fmt: skip
        parser.add_argument("--no-reaper", dest="run_reaper", action="store_false", default=None,
                            help=f"Do not run the reaper loop in this process (default OJS_WORKER_RUN_REAPER = {s.WORKER_RUN_REAPER}).")  # fmt: skip
        parser.add_argument("--worker-id", default=None, help="Worker id (default: worker-<host>-<pid>-<random>).")  # fmt: skip
        parser.add_argument("--label", dest="labels", action="append", default=[],
                            help="A worker label reported in heartbeats (repeatable).")  # fmt: skip
        parser.add_argument("--database", default=None, help="Database alias (default OJS_DATABASE).")  # fmt: skip
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="Serve this worker's Prometheus metrics on this port (needs prometheus-client).")  # fmt: skip
        parser.add_argument("--metrics-addr", default="127.0.0.1",
                            help="Address for --metrics-port (default 127.0.0.1; 0.0.0.0 for all).")  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        if options["concurrency"] is not None and options["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        if options["queues"] == []:
            raise CommandError("--queues needs at least one queue name")
        execution, worker_pool = options["execution"], options["pool"]
        if worker_pool in worker.loop.POOLS:
            # --pool threads|processes: the execution model, as before --execution.
            if execution is not None and execution != worker_pool:
                raise CommandError(f"--pool {worker_pool} contradicts --execution {execution}")
            execution, worker_pool = worker_pool, None
        if worker_pool is not None:
            if options["queues"] is not None:
                raise CommandError(
                    f"--pool {worker_pool} fetches from the pool's queues: leave out --queues"
                )
            from django_ojs import lifecycle
            from django_ojs.exceptions import OJSError

            try:
                lifecycle.get_pool(worker_pool, using=options["database"])
            except OJSError as exc:
                raise CommandError(f"--pool {worker_pool}: {exc}") from exc
        if options["metrics_port"] is not None:
            from django_ojs import metrics

            if not metrics.available():
                raise CommandError(
                    "--metrics-port needs prometheus-client: pip install 'django-ojs[metrics]'"
                )
            try:
                metrics.serve(options["metrics_port"], options["metrics_addr"])
            except OSError as exc:
                raise CommandError(f"--metrics-port {options['metrics_port']}: {exc}") from exc
        status = worker.run(
            queues=options["queues"],
            concurrency=options["concurrency"],
            pool=execution,
            worker_pool=worker_pool,
            poll_interval=options["poll_interval"],
            heartbeat_interval=options["heartbeat_interval"],
            shutdown_grace_period=options["shutdown_grace_period"],
            run_reaper=options["run_reaper"],
            worker_id=options["worker_id"],
            labels=options["labels"],
            using=options["database"],
        )
        if status:
            sys.exit(status)
