"""``manage.py ojs_apikey``: create, list, change and revoke API keys for the OJS HTTP API."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_ojs import apikeys
from django_ojs.conf import settings
from django_ojs.models import ApiKey

SCOPE_HELP = (
    "producer: enqueue only; worker: fetch, ack, nack, heartbeat, progress; operator: "
    "enqueue, inspect jobs/events/queues/dead letter, cancel, activate, retry; "
    "admin: every endpoint (also pause/resume queues, delete from the dead letter)."
)
QUEUES_HELP = "Comma-separated queues the key may use (names, or 'prefix*'); default: every queue."


TENANTS_HELP = (
    "Comma-separated tenants whose jobs the key may enqueue, fetch, read and cancel; "
    "default: every job."
)


def _queues(value: str) -> list[str]:
    return [q.strip() for q in value.split(",") if q.strip()]


def _shown(key: ApiKey) -> str:
    return ",".join(key.queues) if key.queues else "all"


class Command(BaseCommand):
    help = (
        "Create (printed once), list, change (scope, queues) or revoke bearer API keys for "
        "the OJS HTTP API."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a key and print it (only this once).")
        create.add_argument("name", help="What the key is for, e.g. 'billing-service'.")
        create.add_argument("--scope", required=True, choices=apikeys.SCOPES, help=SCOPE_HELP)
        create.add_argument("--queues", default="", help=QUEUES_HELP)
        create.add_argument("--tenants", default="", help=TENANTS_HELP)
        list_ = sub.add_parser(
            "list", help="List keys (prefix, name, scope, state); never secrets."
        )
        change = sub.add_parser("set", help="Change a key's scope and/or queues, at once.")
        change.add_argument("prefix", help="The 12 characters after 'ojs_' in the key.")
        change.add_argument("--scope", choices=apikeys.SCOPES, help=SCOPE_HELP)
        change.add_argument(
            "--queues", default=None, help=QUEUES_HELP + " Pass '' for every queue."
        )
        change.add_argument(
            "--tenants", default=None, help=TENANTS_HELP + " Pass '' for every job."
        )
        revoke = sub.add_parser("revoke", help="Revoke a key by its prefix.")
        revoke.add_argument("prefix", help="The 12 characters after 'ojs_' in the key.")
        for p in (create, list_, change, revoke):
            p.add_argument(
                "--database", default=None, help="Database alias (default OJS_DATABASE)."
            )

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        using = options.get("database")
        if action == "create":
            try:
                key, raw = apikeys.create(
                    options["name"],
                    options["scope"],
                    queues=_queues(options["queues"]),
                    tenants=_queues(options["tenants"]),
                    using=using,
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(raw)
            self.stderr.write(
                f"Created API key {key.prefix!r} ({key.scope}, queues: {_shown(key)}) for "
                f"{key.name!r}. Store it now: "
                "it cannot be shown again. Send it as 'Authorization: Bearer <key>'."
            )
        elif action == "list":
            keys = ApiKey.objects.using(using or settings.DATABASE).order_by("created_at")
            for key in keys:
                state = "active" if key.is_active else f"revoked {key.revoked_at:%Y-%m-%d}"
                used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
                self.stdout.write(
                    f"{key.prefix}  {key.scope:<8}  {state:<18}  last used {used:<16}  "
                    f"queues {_shown(key):<20}  {key.name}"
                )
        elif action == "set":
            if (
                options["scope"] is None
                and options["queues"] is None
                and options["tenants"] is None
            ):
                raise CommandError("Nothing to change: pass --scope, --queues and/or --tenants.")
            try:
                key = apikeys.update(
                    options["prefix"],
                    scope=options["scope"],
                    queues=None if options["queues"] is None else _queues(options["queues"]),
                    tenants=None if options["tenants"] is None else _queues(options["tenants"]),
                    using=using,
                )
            except ApiKey.DoesNotExist:
                raise CommandError(f"No API key with prefix {options['prefix']!r}.") from None
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(
                f"API key {key.prefix!r} ({key.name}) is now {key.scope}, queues: {_shown(key)}."
            )
        else:
            try:
                key = apikeys.revoke(options["prefix"], using=using)
            except ApiKey.DoesNotExist:
                raise CommandError(f"No API key with prefix {options['prefix']!r}.") from None
            self.stdout.write(f"Revoked API key {key.prefix!r} ({key.name}).")
