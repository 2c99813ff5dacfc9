"""``manage.py demo_producer``: enqueue a realistic mix of demo jobs so the admin shows work flowing.

Every ``--interval`` seconds it enqueues a few jobs through the public Python API: quick
successes, emails, a long job with progress, jobs that fail once then succeed, jobs that
always fail (they end in the dead letter), and jobs scheduled a little later.
"""

from __future__ import annotations

import random
import signal
import threading
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

import django_ojs

QUICK_RETRY = {"max_attempts": 3, "initial_interval": "PT2S", "jitter": False}


def batch(n: int) -> list[dict[str, Any]]:
    """One round of demo jobs."""
    jobs: list[dict[str, Any]] = [
        {"type": "demo.add", "args": [n, random.randint(1, 100)]},  # noqa: S311 - demo data
        {"type": "email.send", "args": [f"user{n}@example.com", "Welcome"], "queue": "email"},
        {"type": "test.fail_once", "args": [], "retry": QUICK_RETRY},
        {"type": "demo.add", "args": [n, 1], "scheduled_at": timedelta(seconds=10)},
    ]
    if n % 3 == 0:
        jobs.append({"type": "demo.report", "args": [50, 40]})
    if n % 4 == 0:
        jobs.append({"type": "test.fail_always", "args": [], "retry": QUICK_RETRY})
    return jobs


class Command(BaseCommand):
    help = "Enqueue a mix of demo jobs every few seconds (for `make demo`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=3.0, help="Seconds between rounds.")
        parser.add_argument(
            "--rounds", type=int, default=0, help="Stop after N rounds (0: run until stopped)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        n = 0
        while not stop.is_set():
            n += 1
            django_ojs.enqueue_many(batch(n))
            if options["rounds"] and n >= options["rounds"]:
                break
            stop.wait(options["interval"])
