"""Django system checks for django-ojs (ids ``ojs.E00N`` / ``ojs.W00N``).

Each id is documented in ``docs/reference/system-checks.md``.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning, register

from django_ojs.conf import settings
from django_ojs.drivers import UnsupportedDatabase, get_driver

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
    "OJS_WEBHOOKS_SECRET_GRACE",
    "OJS_WEBHOOKS_CACHE_SECONDS",
    "OJS_MAINTENANCE_CACHE_SECONDS",
    "OJS_TENANT_LIMITS_CACHE_SECONDS",
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
    listen = settings.LISTEN_DATABASE
    if listen is not None and listen not in django_settings.DATABASES:
        out.append(
            Error(
                f"OJS_LISTEN_DATABASE names {listen!r}, which is not in DATABASES.", id="ojs.E013"
            )
        )
    out.extend(_check_read_database(alias))
    try:
        driver = get_driver(alias)
    except UnsupportedDatabase as exc:
        out.append(Error(str(exc), id="ojs.E002"))
    else:
        if not out:
            # ojs.W001 (SQLite's transaction mode), ojs.W005 (LISTEN through a pooler)
            out.extend(driver.check_configuration())
    if not getattr(django_settings, "USE_TZ", True):
        out.append(
            Error(
                "django-ojs needs USE_TZ = True (OJS timestamps carry a timezone).", id="ojs.E003"
            )
        )
    return out


def _check_read_database(jobs_alias: str) -> list[CheckMessage]:
    """``OJS_READ_DATABASE``: an alias of DATABASES, on the job database's engine."""
    read = settings.READ_DATABASE
    if read is None or read == jobs_alias:
        return []
    if read not in django_settings.DATABASES:
        return [
            Error(f"OJS_READ_DATABASE names {read!r}, which is not in DATABASES.", id="ojs.E014")
        ]
    engine = django_settings.DATABASES[read].get("ENGINE")
    jobs_engine = django_settings.DATABASES[jobs_alias].get("ENGINE")
    if engine != jobs_engine:
        return [
            Warning(
                f"OJS_READ_DATABASE names {read!r}, whose ENGINE ({engine}) is not the job "
                f"database's ({jobs_engine}): a replica of the job database holds the same "
                "tables on the same engine.",
                id="ojs.W006",
            )
        ]
    return []


@register(TAG)
def check_routing(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    """The job tables are read, written and migrated where ``OJS_DATABASE`` says.

    django-ojs's own code names the alias, but the admin's changelists (and any code of
    yours that reads ``Job.objects``) go where the database routers send them.
    """
    from django.db import DEFAULT_DB_ALIAS, router

    from django_ojs.models import Job

    alias = settings.DATABASE
    if alias not in django_settings.DATABASES:
        return []  # ojs.E001
    out: list[CheckMessage] = []
    fix = (
        "Add 'django_ojs.routers.OJSRouter' to DATABASE_ROUTERS (or a router of your own "
        f"that sends the 'ojs' app to {alias!r})."
    )
    write = router.db_for_write(Job)
    if write != alias:
        return [
            Error(
                f"OJS_DATABASE is {alias!r} but the database routers send writes of "
                f"django-ojs's models to {write!r}: the admin would change another "
                "database's rows.",
                hint=fix,
                id="ojs.E016",
            )
        ]
    read = router.db_for_read(Job)
    if read != alias and alias != DEFAULT_DB_ALIAS:
        # With the jobs beside your models, a primary/replica router of yours may send
        # reads to a replica on purpose: that is your choice, not a mistake.
        out.append(
            Warning(
                f"OJS_DATABASE is {alias!r} but the database routers send reads of "
                f"django-ojs's models to {read!r}: the admin's lists would show that "
                "database's jobs.",
                hint=fix,
                id="ojs.W009",
            )
        )
    if not router.allow_migrate_model(alias, Job):
        return [
            *out,
            Error(
                f"The database routers do not allow django-ojs's migrations on OJS_DATABASE "
                f"{alias!r}: migrate --database {alias} would not create the job tables.",
                hint=fix,
                id="ojs.E017",
            ),
        ]
    if alias != DEFAULT_DB_ALIAS and router.allow_migrate_model(DEFAULT_DB_ALIAS, Job):
        return [
            *out,
            Warning(
                f"The job tables live in {alias!r} (OJS_DATABASE) but the database routers "
                "also let manage.py migrate create them in 'default', where nothing uses them.",
                hint=fix,
                id="ojs.W008",
            ),
        ]
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
    for name in ("OJS_METRICS_MAX_TYPES", "OJS_METRICS_MAX_TENANTS"):
        value = getattr(django_settings, name, None)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            out.append(Error(f"{name} must be a non-negative integer.", id="ojs.E019"))
    for name in ("OJS_TENANT_REQUIRED", "OJS_TENANT_FAIRNESS"):
        value = getattr(django_settings, name, None)
        if value is not None and not isinstance(value, bool):
            # A string such as "False" would read as on.
            out.append(Error(f"{name} must be True or False.", id="ojs.E018"))
    from django_ojs import tenantlimits
    from django_ojs.exceptions import ValidationError

    try:
        tenantlimits.throttling(getattr(django_settings, "OJS_TENANT_THROTTLING", None))
    except ValidationError as exc:
        out.append(Error(exc.message, id="ojs.E018"))
    try:
        tenantlimits.declared(getattr(django_settings, "OJS_TENANTS", None))
    except ValidationError as exc:
        out.append(Error(exc.message, id="ojs.E018"))
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


@register(TAG)
def check_admin_ui(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    """``OJS_ADMIN_UI_DIR``: the built official admin UI has an ``index.html``."""
    value = getattr(django_settings, "OJS_ADMIN_UI_DIR", None)
    if value in (None, ""):
        return []
    index = settings.ADMIN_UI_DIR / "index.html" if settings.ADMIN_UI_DIR else None
    if index is not None and index.is_file():
        return []
    return [
        Warning(
            f"OJS_ADMIN_UI_DIR is {str(value)!r}, which has no index.html: /ojs/admin/ "
            "answers 404.",
            hint="Build openjobspec/ojs-admin-ui (npm ci, then npx vite build) and set "
            "OJS_ADMIN_UI_DIR to its dist-app/ directory.",
            id="ojs.W003",
        )
    ]


@register(TAG)
def check_webhooks(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: object
) -> list[CheckMessage]:
    """The webhook settings, and an allowlist of job types that would refuse deliveries."""
    from django_ojs.exceptions import ValidationError
    from django_ojs.retry import RetryPolicy
    from django_ojs.validation import type_allowed, validate_queue
    from django_ojs.webhooks import DELIVER_TYPE

    out: list[CheckMessage] = []
    policy = getattr(django_settings, "OJS_WEBHOOKS_RETRY", None)
    if policy is not None:
        try:
            RetryPolicy.from_wire(policy)
        except ValidationError as exc:
            out.append(Error(f"OJS_WEBHOOKS_RETRY is invalid: {exc.message}", id="ojs.E010"))
    queue = getattr(django_settings, "OJS_WEBHOOKS_QUEUE", None)
    if queue is not None:
        try:
            validate_queue(queue, field="OJS_WEBHOOKS_QUEUE")
        except ValidationError as exc:
            out.append(Error(f"OJS_WEBHOOKS_QUEUE is invalid: {exc.message}", id="ojs.E011"))
    for name in ("OJS_WEBHOOKS_TIMEOUT", "OJS_WEBHOOKS_MAX_RESPONSE_BYTES"):
        value = getattr(django_settings, name, None)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
        ):
            out.append(Error(f"{name} must be a positive number.", id="ojs.E012"))
    allowed = getattr(django_settings, "OJS_ALLOWED_JOB_TYPES", None)
    if (
        isinstance(allowed, list | tuple | set | frozenset)
        and all(isinstance(p, str) and p for p in allowed)
        and not type_allowed(DELIVER_TYPE, tuple(allowed))
    ):
        out.append(
            Warning(
                f"OJS_ALLOWED_JOB_TYPES leaves out {DELIVER_TYPE}: webhook deliveries cannot "
                "be enqueued.",
                hint=f"Add '{DELIVER_TYPE}' (or 'ojs.*') to OJS_ALLOWED_JOB_TYPES, unless no "
                "webhook subscription will ever exist.",
                id="ojs.W004",
            )
        )
    return out
