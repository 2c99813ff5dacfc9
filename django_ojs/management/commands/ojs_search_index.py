"""``manage.py ojs_search_index``: the optional GIN indexes for searching by args and meta.

Searching jobs by a JSON fragment of their ``args`` or ``meta`` (the admin's
``args:{...}`` search, the HTTP list endpoints' ``args=``/``meta=``) is ``@>`` on
PostgreSQL. Without an index it reads every row the other filters leave. The two GIN
indexes this command builds serve it directly, at a cost to every insert, which is why
the migrations do not create them.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import jobquery, lifecycle


class Command(BaseCommand):
    help = "Create, drop or show the optional GIN indexes on job args and meta (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--create",
            action="store_true",
            help="Build the missing indexes (CREATE INDEX CONCURRENTLY: writes go on).",
        )
        action.add_argument("--drop", action="store_true", help="Drop them.")
        parser.add_argument(
            "--database", default=None, help="Database alias (default OJS_DATABASE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        create = True if options["create"] else False if options["drop"] else None
        found = jobquery.search_indexes(
            create=create, using=lifecycle.database(options["database"])
        )
        if found is None:
            raise CommandError(
                "This database has no such indexes: on SQLite, args/meta search checks each "
                "row with a registered function (see the 'Use SQLite' guide)."
            )
        for name, present in found.items():
            self.stdout.write(f"{name}: {'present' if present else 'absent'}")
