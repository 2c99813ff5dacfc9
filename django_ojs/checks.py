"""Django system checks for django-ojs (ids ``ojs.E00N`` / ``ojs.W00N``).

Each id is documented in ``docs/reference/system-checks.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections

from django_ojs.conf import settings

#: The tag of django-ojs's own checks: ``manage.py check --tag ojs`` runs only them, and
#: ``ojs_worker`` runs only them when it starts.
TAG = "ojs"

NUMERIC_SETTINGS = (
    "OJS_VISIBILITY_TIMEOUT",
    "OJS_EXECUTION_TIMEOUT",
    "OJS_GRACE_PERIOD",
    "OJS_HEARTBEAT_TIMEOUT",
    "OJS_WORKER_HEARTBEAT_INTERVAL",
    "OJS_WORKER_STALE_AFTER",
    "OJS_API_KEY_CACHE_SECONDS",
    "OJS_MAINTENANCE_CACHE_SECONDS",
    "OJS_BULK_IDEMPOTENCY_SECONDS",
    "OJS_PROGRESS_STREAM_SECONDS",
    "OJS_PROGRESS_STREAM_POLL_SECONDS",
    "OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS",
)


@register(TAG)
def check_database(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    out: list[CheckMessage] = []
    alias = settings.DATABASE
    if alias not in django_settings.DATABASES:
        return [
            Error(
                f"OJS_DATABASE names {alias!r}, which is not in DATABASES.",
                id="ojs.E001",
            )
        ]
    conn = connections[alias]
    if conn.vendor not in ("postgresql", "sqlite"):
        out.append(
            Error(
                f"django-ojs supports PostgreSQL and SQLite; {alias!r} is {conn.vendor}.",
                id="ojs.E002",
            )
        )
    if conn.vendor == "sqlite":
        options = conn.settings_dict.get("OPTIONS", {})
        if str(options.get("transaction_mode", "")).upper() not in ("IMMEDIATE", "EXCLUSIVE"):
            out.append(
                Warning(
                    "SQLite without OPTIONS['transaction_mode'] = 'IMMEDIATE' can fail with "
                    "'database is locked' when a worker and the web process write at once.",
                    hint="Set DATABASES[...]['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
                    "'timeout': 20, 'init_command': 'PRAGMA journal_mode=WAL;'}.",
                    id="ojs.W001",
                )
            )
    if not getattr(django_settings, "USE_TZ", True):
        out.append(
            Error(
                "django-ojs needs USE_TZ = True (OJS timestamps carry a timezone).", id="ojs.E003"
            )
        )
    return out


@register(TAG)
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    out: list[CheckMessage] = []
    for name in NUMERIC_SETTINGS:
        value = getattr(django_settings, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            out.append(Error(f"{name} must be a non-negative number of seconds.", id="ojs.E004"))
    policy = getattr(django_settings, "OJS_RETRY_POLICY", None)
    if policy is not None:
        from django_ojs.exceptions import ValidationError
        from django_ojs.retry import RetryPolicy

        try:
            RetryPolicy.from_wire(policy)
        except ValidationError as exc:
            out.append(Error(f"OJS_RETRY_POLICY is invalid: {exc.message}", id="ojs.E005"))
    return out


@register(TAG)
def check_http_api(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    """The HTTP binding's settings (``OJS_API_AUTH``, ``OJS_RESPONSE_CONTENT_TYPE``...)."""
    from django_ojs.conf import API_AUTH_CHOICES, RESPONSE_CONTENT_TYPES

    out: list[CheckMessage] = []
    auth = getattr(django_settings, "OJS_API_AUTH", None)
    if auth is not None and auth not in API_AUTH_CHOICES:
        out.append(
            Error(
                f"OJS_API_AUTH is {auth!r}; it must be one of {', '.join(API_AUTH_CHOICES)}.",
                id="ojs.E006",
            )
        )
    elif auth == "none" and not django_settings.DEBUG:
        out.append(
            Warning(
                "OJS_API_AUTH = 'none' opens the OJS HTTP API to anyone who can reach it, "
                "and DEBUG is False.",
                hint="Remove OJS_API_AUTH (bearer API keys are the default) and create keys "
                "with 'manage.py ojs_apikey create NAME --scope producer|worker|operator|admin'.",
                id="ojs.W002",
            )
        )
    content_type = getattr(django_settings, "OJS_RESPONSE_CONTENT_TYPE", None)
    if content_type is not None and content_type not in RESPONSE_CONTENT_TYPES:
        out.append(
            Error(
                f"OJS_RESPONSE_CONTENT_TYPE is {content_type!r}; it must be one of "
                f"{', '.join(RESPONSE_CONTENT_TYPES)}.",
                id="ojs.E007",
            )
        )
    limit = getattr(django_settings, "OJS_MAX_REQUEST_BYTES", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        out.append(Error("OJS_MAX_REQUEST_BYTES must be a positive integer.", id="ojs.E008"))
    allowed = getattr(django_settings, "OJS_ALLOWED_JOB_TYPES", None)
    if allowed is not None and (
        isinstance(allowed, str)
        or not isinstance(allowed, list | tuple | set | frozenset)
        or not all(isinstance(p, str) and p for p in allowed)
    ):
        out.append(
            Error(
                "OJS_ALLOWED_JOB_TYPES must be None or a list of job types "
                "('email.send') and 'prefix.*' patterns.",
                id="ojs.E009",
            )
        )
    return out
