"""``manage.py ojs_partition``: the optional time-partitioned layout (PostgreSQL).

Without options it shows each table's layout. ``--enable`` partitions ``ojs_job`` and
``ojs_event`` (or those named by ``--tables``) by day, week or month; from then on the
reaper creates the periods ahead and drops expired ones. ``--maintain`` does one such
pass now; ``--disable`` makes the tables plain again. See the "Partition the job tables" guide for the trade-offs.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import lifecycle, reaper
from django_ojs.conf import settings


class Command(BaseCommand):
    help = "Show, enable or maintain the time-partitioned layout of jobs and events (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        action = parser.add_mutually_exclusive_group()
        action.add_argument(
            "--enable",
            action="store_true",
            help="Partition the tables (copies their rows; they are locked meanwhile).",
        )
        action.add_argument(
            "--disable",
            action="store_true",
            help="Make the tables plain again (copies their rows; they are locked meanwhile).",
        )
        action.add_argument(
            "--maintain",
            action="store_true",
            help="Create the periods ahead and drop expired ones now (the reaper does it).",
        )
        parser.add_argument("--interval", choices=lifecycle.PARTITION_INTERVALS, default="day")
        parser.add_argument(
            "--tables",
            default="jobs,events",
            help="Comma-separated: jobs, events (default both).",
        )
        parser.add_argument(
            "--database", default=None, help="Database alias (default OJS_DATABASE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        using = lifecycle.database(options["database"])
        tables = [t.strip() for t in options["tables"].split(",") if t.strip()]
        unknown = [t for t in tables if t not in lifecycle.PARTITION_TABLES]
        if unknown or not tables:
            raise CommandError(f"--tables takes jobs and/or events, not {', '.join(unknown)}")
        if options["enable"]:
            try:
                lifecycle.partition_tables(
                    tables,
                    interval=options["interval"],
                    premake=settings.PARTITION_PREMAKE,
                    using=using,
                )
            except NotImplementedError as exc:
                raise CommandError(f"{exc}: partitioning needs PostgreSQL.") from None
        elif options["disable"]:
            lifecycle.unpartition_tables(tables, using=using)
        elif options["maintain"]:
            done = reaper.maintain_partitions(using=using)
            self.stdout.write(f"created {done['created']}, dropped {done['dropped']}")
        for name in tables:
            found = lifecycle.partition_layout(name, using=using)
            if found is None:
                self.stdout.write(f"{name} ({lifecycle.PARTITION_TABLES[name]}): not partitioned")
                continue
            self.stdout.write(
                f"{name} ({found.table}): by {found.interval}, {len(found.ranges)} periods"
            )
            for part in found.ranges:
                assert part.start is not None and part.end is not None
                self.stdout.write(f"  {part.name}: {part.start:%Y-%m-%d} to {part.end:%Y-%m-%d}")
            if found.default is not None:
                self.stdout.write(f"  {found.default.name}: rows outside every period")
