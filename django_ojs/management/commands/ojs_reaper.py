"""``manage.py ojs_reaper``: run the maintenance loop (promote, expire, rescue, prune)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_ojs import reaper
from django_ojs.conf import settings


class Command(BaseCommand):
    help = "Promote due jobs, discard stale ones, rescue lost attempts and prune old rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help=f"Seconds between passes (default OJS_REAPER_INTERVAL = {settings.REAPER_INTERVAL}).",
        )
        parser.add_argument(
            "--prune-interval",
            type=float,
            default=None,
            help=f"Seconds between prunes (default OJS_PRUNE_INTERVAL = {settings.PRUNE_INTERVAL}).",
        )
        parser.add_argument(
            "--once", action="store_true", help="Run one pass (with pruning) and exit."
        )
        parser.add_argument(
            "--database", default=None, help="Database alias (default OJS_DATABASE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            result = reaper.run_once(prune=True, using=options["database"])
            self.stdout.write(str(result))
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        reaper.run(
            interval=options["interval"],
            prune_interval=options["prune_interval"],
            stop=stop,
            using=options["database"],
        )
