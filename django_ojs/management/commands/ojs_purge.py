"""``manage.py ojs_purge --all``: empty the job store (jobs, events, workers, queues).

For development and test databases, e.g. between conformance tests. API keys are kept.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import lifecycle


class Command(BaseCommand):
    help = "Delete every job, event, worker and queue row (API keys are kept)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all", action="store_true", required=True, help="Delete all of them (required)."
        )
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        parser.add_argument(
            "--database", default=None, help="Database alias (default OJS_DATABASE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["yes"]:
            if not sys.stdin.isatty():
                raise CommandError("Refusing to delete every job without --yes.")
            answer = input("Delete every job, event, worker and queue? Type 'yes': ")
            if answer.strip().lower() != "yes":
                raise CommandError("Cancelled.")
        counts = lifecycle.purge_all(using=options["database"])
        if options["verbosity"] > 0:
            self.stdout.write(
                "Deleted " + ", ".join(f"{n} {name}" for name, n in counts.items()) + "."
            )
