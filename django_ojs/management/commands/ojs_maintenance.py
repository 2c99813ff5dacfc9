"""``manage.py ojs_maintenance on|off|status``: switch maintenance mode (admin API §12.1).

While it is on, workers fetch nothing and scheduled jobs and cron entries wait; producers
can still enqueue. The switch is recorded in the audit trail as ``command:<OS user>``.
"""

from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import lifecycle
from django_ojs.actors import Actor
from django_ojs.exceptions import OJSError


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "unknown"


class Command(BaseCommand):
    help = "Switch maintenance mode on or off (workers fetch nothing while it is on), or show it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("on", "off", "status"))
        parser.add_argument("--reason", default="", help="Why (shown in the admin and the API).")
        parser.add_argument(
            "--duration",
            default=None,
            help="Estimated duration, ISO-8601 (PT30M) or seconds; sets estimated_end.",
        )
        parser.add_argument(
            "--database", default=None, help="Database alias (default OJS_DATABASE)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        action, using = options["action"], options["database"]
        if action == "status":
            status = lifecycle.maintenance_status(using=using)
        else:
            duration: Any = options["duration"]
            if duration is not None and duration.replace(".", "", 1).isdigit():
                duration = float(duration)
            try:
                status = lifecycle.set_maintenance(
                    action == "on",
                    reason=options["reason"],
                    estimated_duration=duration,
                    actor=Actor(f"command:{_user()}", source="command"),
                    using=using,
                )
            except OJSError as exc:
                raise CommandError(exc.message) from None
        if not status.enabled:
            self.stdout.write("Maintenance mode is off.")
            return
        line = f"Maintenance mode is on since {status.enabled_at:%Y-%m-%d %H:%M:%S %Z}"
        if status.estimated_end is not None:
            line += f", expected to end at {status.estimated_end:%Y-%m-%d %H:%M:%S %Z}"
        if status.reason:
            line += f": {status.reason}"
        self.stdout.write(line + ".")
