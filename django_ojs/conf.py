"""Typed access to the ``OJS_*`` Django settings, read lazily and remembered.

Defaults are module constants (``DEFAULT_*``) so docs and code name them once. A setting
is read from Django's settings once and remembered for as long as Django keeps the same
settings object: ``override_settings``, ``modify_settings`` and pytest-django's
``settings`` fixture each put a new one in place, so tests see their changes. Reading a
setting Django does not define raises and catches an ``AttributeError`` inside
``getattr``, about a microsecond, and a push or a claim reads several. Assigning to
``django.conf.settings`` at run time (which Django's documentation advises against) is
not seen. This module never writes settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings as django_settings

DEFAULT_DATABASE = "default"
DEFAULT_QUEUE = "default"
#: Reservation length when neither the fetch nor the job says (HTTP binding, SDK: 30 s).
DEFAULT_VISIBILITY_TIMEOUT = 30.0
#: Execution timeout of one attempt (OJS core §5.2, timeouts §5.1: 1800 s).
DEFAULT_EXECUTION_TIMEOUT = 1800.0
#: Time between the soft timeout signal and forced termination (timeouts §5.4).
DEFAULT_GRACE_PERIOD = 30.0
#: Longest silence allowed between heartbeats for an active job (timeouts §5.5).
DEFAULT_HEARTBEAT_TIMEOUT = 60.0
#: How often a worker should beat (worker protocol §4.2).
DEFAULT_WORKER_HEARTBEAT_INTERVAL = 5.0
#: A worker silent this long is dead and its jobs are recovered (worker protocol §10).
DEFAULT_WORKER_STALE_AFTER = 60.0
#: Largest accepted envelope, in bytes (HTTP binding §16, JSON format §12.3).
DEFAULT_MAX_ENVELOPE_BYTES = 1024 * 1024
#: Error history entries kept per job (retry §10 asks for at least the last 10).
DEFAULT_ERROR_HISTORY_LIMIT = 100
DEFAULT_EVENT_SOURCE = "ojs://django-ojs"
#: Write lifecycle events to the event table (the signal is sent either way).
DEFAULT_STORE_EVENTS = True
#: Claims wait for their commit to reach disk (PostgreSQL's synchronous_commit for them).
DEFAULT_CLAIM_SYNCHRONOUS_COMMIT = False
#: Overrides of the OJS default retry policy (an empty dict keeps the OJS defaults).
DEFAULT_RETRY_POLICY: dict[str, object] = {}
#: How often the reaper promotes, expires and rescues (seconds; OJS wants <= 1 s).
DEFAULT_REAPER_INTERVAL = 0.5
#: How often the reaper prunes (seconds).
DEFAULT_PRUNE_INTERVAL = 60.0
#: Handler modules imported from every installed app at startup (``<app>.jobs``).
DEFAULT_HANDLER_MODULES = ("jobs",)
#: Queues an ``ojs_worker`` fetches from, most important first.
DEFAULT_WORKER_QUEUES = ("default",)
#: Handlers an ``ojs_worker`` runs at once (worker protocol §8.1: 10).
DEFAULT_WORKER_CONCURRENCY = 10
#: ``threads`` or ``processes`` (CPU-bound handlers; a slot can be killed).
DEFAULT_WORKER_POOL = "threads"
#: Seconds an idle worker waits before looking for work again (SQLite has no NOTIFY).
DEFAULT_WORKER_POLL_INTERVAL = 1.0
#: Seconds a terminating worker lets running handlers finish (worker protocol §7.3: 25).
DEFAULT_SHUTDOWN_GRACE_PERIOD = 25.0
#: Whether ``ojs_worker`` also runs the reaper loop (one leader at a time on PostgreSQL).
DEFAULT_WORKER_RUN_REAPER = True
#: How the HTTP API authenticates: ``"api_key"`` (bearer keys, staff sessions) or ``"none"``.
DEFAULT_API_AUTH = "api_key"
API_AUTH_CHOICES = ("api_key", "none")
#: Content type of HTTP API responses (HTTP binding §4.3); ``application/json`` for old SDKs.
DEFAULT_RESPONSE_CONTENT_TYPE = "application/openjobspec+json"
RESPONSE_CONTENT_TYPES = ("application/openjobspec+json", "application/json")
#: Seconds an API key, once verified, is trusted without reading its row again: the longest
#: a key revoked or narrowed in another process keeps working (0: read it on every request).
DEFAULT_API_KEY_CACHE_SECONDS = 5.0
#: Most items (jobs or job ids; jobs a filter matches) one bulk request may name (bulk
#: operations §9.1: at least 100, should be 1000); more is 413.
DEFAULT_BULK_MAX_ITEMS = 1000
#: Seconds the answer to a bulk request with an idempotency key is kept (§10.2: >= 24 h).
DEFAULT_BULK_IDEMPOTENCY_SECONDS = 86400.0
#: Longest a progress stream (SSE) stays open, in seconds; the client reconnects after it.
DEFAULT_PROGRESS_STREAM_SECONDS = 300.0
#: Seconds between two reads of a followed job's progress.
DEFAULT_PROGRESS_STREAM_POLL_SECONDS = 0.5
#: Seconds of silence after which a progress stream sends a heartbeat comment.
DEFAULT_PROGRESS_STREAM_HEARTBEAT_SECONDS = 15.0
#: Seconds a process trusts the maintenance switch it last read: the longest another
#: process's workers keep claiming after maintenance mode is switched on (0: read it on
#: every fetch).
DEFAULT_MAINTENANCE_CACHE_SECONDS = 1.0
#: Largest accepted HTTP request body, in bytes (413 above it).
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
#: Deepest nesting of arrays/objects accepted in a JSON value a client sends (args, meta,
#: result, error details...); deeper input is refused with 400.
DEFAULT_MAX_JSON_DEPTH = 64
#: Job types that may be enqueued (exact types or ``prefix.*``); None allows every type.
DEFAULT_ALLOWED_JOB_TYPES: tuple[str, ...] | None = None
#: Seconds between in-place refreshes of the admin dashboard and job list (0: never).
DEFAULT_ADMIN_REFRESH_SECONDS = 5
#: Directory of the built official admin UI served at /ojs/admin/ (None: not served).
DEFAULT_ADMIN_UI_DIR: str | None = None
#: Periods the reaper keeps created ahead of the current one, on partitioned tables.
DEFAULT_PARTITION_PREMAKE = 3
#: Retention of finished jobs and events, in seconds (None keeps them forever).
DEFAULT_RETENTION = {
    "completed": 7 * 86400,
    "cancelled": 7 * 86400,
    "discarded": 30 * 86400,
    "dead_letter": 180 * 86400,  # DLQ §8: max_age P180D
    "events": 7 * 86400,  # events §9: 7 days
    # Completed and cancelled workflows (failed ones follow dead_letter: they can resume).
    "workflows": 7 * 86400,
}

#: Queue of the webhook delivery jobs (``ojs.webhook.deliver``); a worker must serve it.
DEFAULT_WEBHOOKS_QUEUE = "ojs.webhooks"
#: Seconds a webhook delivery waits to connect and for each read (webhooks §7.3: 30 s).
DEFAULT_WEBHOOKS_TIMEOUT = 30.0
#: Bytes of a webhook endpoint's response body read at most (the rest is not read).
DEFAULT_WEBHOOKS_MAX_RESPONSE_BYTES = 64 * 1024
#: Deliver to loopback, private, link-local... addresses (development only).
DEFAULT_WEBHOOKS_ALLOW_PRIVATE = False
#: Accept ``http://`` subscription URLs (webhooks §8.4: HTTPS in production).
DEFAULT_WEBHOOKS_ALLOW_HTTP = False
#: Seconds the previous secret keeps signing after a rotation (webhooks §8.3: 24 h).
DEFAULT_WEBHOOKS_SECRET_GRACE = 86400.0
#: Retry policy of delivery jobs: webhooks §7.2's 8 attempts (30 s, 2 min, 8 min...
#: growing fourfold, at most 24 h apart, with jitter: about 35 hours in all).
DEFAULT_WEBHOOKS_RETRY: dict[str, object] = {
    "max_attempts": 8,
    "initial_interval": "PT30S",
    "backoff_coefficient": 4.0,
    "max_interval": "PT24H",
    "jitter": True,
    # A dead delivery (webhooks §7.2) stays in the dead letter for inspection and replay.
    "on_exhaustion": "dead_letter",
}
#: Seconds a process trusts its answer to "is there an active subscription?" (the
#: dispatcher skips its work meanwhile when there is none).
DEFAULT_WEBHOOKS_CACHE_SECONDS = 5.0

# Only the trace context by default: it costs nothing outside a trace (the enqueue side
# is skipped then), and logging every push and attempt is the application's choice.
DEFAULT_ENQUEUE_MIDDLEWARE = ["django_ojs.middleware.TraceContextMiddleware"]
DEFAULT_EXECUTION_MIDDLEWARE = ["django_ojs.middleware.TraceContextMiddleware"]

#: Refuse a job without ``meta.tenant_id`` (multi-tenancy §5.1: 422).
DEFAULT_TENANT_REQUIRED = False
#: Tenants take turns in each queue (fair scheduling §9); off: first in, first out.
DEFAULT_TENANT_FAIRNESS = True
#: Seconds a process trusts the tenants' limits it last read: the longest a change made
#: elsewhere (the admin, another process) takes to apply here (0: read them every time).
DEFAULT_TENANT_LIMITS_CACHE_SECONDS = 1.0


_UNSET = object()
#: The Django settings object last read, and the raw values read from it (``_UNSET``: not
#: defined). One tuple, replaced whole, so a thread never pairs one object's values with
#: another object.
_read: tuple[object, dict[str, Any]] = (None, {})


def _holder() -> object:
    # The object behind django.conf.settings, past LazySettings' own attribute lookup.
    return object.__getattribute__(django_settings, "_wrapped")


class Settings:
    """One typed property per ``OJS_*`` setting, read once (see the module's docstring)."""

    def _get(self, name: str, default: Any) -> Any:
        global _read
        holder = _holder()
        read_from, values = _read
        if read_from is not holder:
            values = {}
            _read = (holder, values)
        try:
            value = values[name]
        except KeyError:
            value = values[name] = getattr(django_settings, name, _UNSET)
        return default if value is _UNSET else value

    @property
    def DATABASE(self) -> str:
        """Database alias holding the job tables (``OJS_DATABASE``)."""
        return str(self._get("OJS_DATABASE", DEFAULT_DATABASE))

    @property
    def LISTEN_DATABASE(self) -> str | None:
        """Database alias the ``LISTEN`` connections use (``OJS_LISTEN_DATABASE``): one
        straight to PostgreSQL when ``OJS_DATABASE`` goes through a transaction pooler.
        None: the job database's own alias."""
        value = self._get("OJS_LISTEN_DATABASE", None)
        return None if value is None else str(value)

    @property
    def READ_DATABASE(self) -> str | None:
        """Database alias the read-only pages read from (``OJS_READ_DATABASE``): a replica
        of the job database for the admin's lists and views, the dashboard, the metrics
        gauges and the admin API's lists. None: the job database itself."""
        value = self._get("OJS_READ_DATABASE", None)
        return None if value is None else str(value)

    @property
    def VISIBILITY_TIMEOUT(self) -> float:
        """Seconds a fetched job stays reserved without a heartbeat."""
        return float(self._get("OJS_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT))

    @property
    def EXECUTION_TIMEOUT(self) -> float:
        """Default execution timeout of one attempt, in seconds."""
        return float(self._get("OJS_EXECUTION_TIMEOUT", DEFAULT_EXECUTION_TIMEOUT))

    @property
    def GRACE_PERIOD(self) -> float:
        """Default grace period after the execution timeout, in seconds."""
        return float(self._get("OJS_GRACE_PERIOD", DEFAULT_GRACE_PERIOD))

    @property
    def HEARTBEAT_TIMEOUT(self) -> float:
        """Default job heartbeat (stall) timeout, in seconds."""
        return float(self._get("OJS_HEARTBEAT_TIMEOUT", DEFAULT_HEARTBEAT_TIMEOUT))

    @property
    def WORKER_HEARTBEAT_INTERVAL(self) -> float:
        """Seconds between worker heartbeats."""
        return float(self._get("OJS_WORKER_HEARTBEAT_INTERVAL", DEFAULT_WORKER_HEARTBEAT_INTERVAL))

    @property
    def WORKER_STALE_AFTER(self) -> float:
        """Seconds of heartbeat silence after which a worker is considered dead."""
        return float(self._get("OJS_WORKER_STALE_AFTER", DEFAULT_WORKER_STALE_AFTER))

    @property
    def RETRY_POLICY(self) -> dict[str, Any]:
        """Overrides of the default retry policy (merged over the OJS defaults)."""
        return dict(self._get("OJS_RETRY_POLICY", DEFAULT_RETRY_POLICY) or {})

    @property
    def STORE_EVENTS(self) -> bool:
        """Write lifecycle events to the event table (signals are sent either way)."""
        return bool(self._get("OJS_STORE_EVENTS", DEFAULT_STORE_EVENTS))

    @property
    def CLAIM_SYNCHRONOUS_COMMIT(self) -> bool:
        """Let a fetch's own transaction wait for its claim to be flushed to disk."""
        return bool(self._get("OJS_CLAIM_SYNCHRONOUS_COMMIT", DEFAULT_CLAIM_SYNCHRONOUS_COMMIT))

    @property
    def ADMIN_REFRESH_SECONDS(self) -> int:
        """Seconds between in-place refreshes of the admin dashboard and job list (0: off)."""
        value = self._get("OJS_ADMIN_REFRESH_SECONDS", DEFAULT_ADMIN_REFRESH_SECONDS)
        return max(int(value or 0), 0)

    @property
    def ADMIN_UI_DIR(self) -> Path | None:
        """Directory of the built official OJS admin UI (``dist-app/``); ``None``: off."""
        value = self._get("OJS_ADMIN_UI_DIR", DEFAULT_ADMIN_UI_DIR)
        return None if value in (None, "") else Path(value)

    @property
    def EVENT_SOURCE(self) -> str:
        """The ``source`` URI of emitted events."""
        return str(self._get("OJS_EVENT_SOURCE", DEFAULT_EVENT_SOURCE))

    @property
    def MAX_ENVELOPE_BYTES(self) -> int:
        """Largest accepted job envelope in bytes."""
        return int(self._get("OJS_MAX_ENVELOPE_BYTES", DEFAULT_MAX_ENVELOPE_BYTES))

    @property
    def ERROR_HISTORY_LIMIT(self) -> int:
        """How many error history entries a job keeps (oldest dropped first)."""
        return int(self._get("OJS_ERROR_HISTORY_LIMIT", DEFAULT_ERROR_HISTORY_LIMIT))

    @property
    def REAPER_INTERVAL(self) -> float:
        """Seconds between reaper passes (promote, expire, rescue, recover)."""
        return float(self._get("OJS_REAPER_INTERVAL", DEFAULT_REAPER_INTERVAL))

    @property
    def PARTITION_PREMAKE(self) -> int:
        """Partitions the reaper keeps created ahead of the current period (PostgreSQL)."""
        return int(self._get("OJS_PARTITION_PREMAKE", DEFAULT_PARTITION_PREMAKE))

    @property
    def PRUNE_INTERVAL(self) -> float:
        """Seconds between retention pruning passes."""
        return float(self._get("OJS_PRUNE_INTERVAL", DEFAULT_PRUNE_INTERVAL))

    @property
    def HANDLER_MODULES(self) -> tuple[str, ...]:
        """Module names autodiscovered in installed apps for ``@handler`` functions."""
        value = self._get("OJS_HANDLER_MODULES", DEFAULT_HANDLER_MODULES)
        return (value,) if isinstance(value, str) else tuple(value)

    @property
    def WORKER_QUEUES(self) -> tuple[str, ...]:
        """Default ``--queues`` of ``ojs_worker``."""
        value = self._get("OJS_WORKER_QUEUES", DEFAULT_WORKER_QUEUES)
        return (value,) if isinstance(value, str) else tuple(value)

    @property
    def WORKER_CONCURRENCY(self) -> int:
        """Default ``--concurrency`` of ``ojs_worker``."""
        return int(self._get("OJS_WORKER_CONCURRENCY", DEFAULT_WORKER_CONCURRENCY))

    @property
    def WORKER_POOL(self) -> str:
        """Default ``--pool`` of ``ojs_worker``: ``threads`` or ``processes``."""
        return str(self._get("OJS_WORKER_POOL", DEFAULT_WORKER_POOL))

    @property
    def WORKER_POLL_INTERVAL(self) -> float:
        """Seconds between looks for work when no notification arrives."""
        return float(self._get("OJS_WORKER_POLL_INTERVAL", DEFAULT_WORKER_POLL_INTERVAL))

    @property
    def SHUTDOWN_GRACE_PERIOD(self) -> float:
        """Seconds a terminating worker waits for running handlers before failing them."""
        return float(self._get("OJS_SHUTDOWN_GRACE_PERIOD", DEFAULT_SHUTDOWN_GRACE_PERIOD))

    @property
    def WORKER_RUN_REAPER(self) -> bool:
        """Whether ``ojs_worker`` runs the reaper loop too."""
        return bool(self._get("OJS_WORKER_RUN_REAPER", DEFAULT_WORKER_RUN_REAPER))

    @property
    def API_AUTH(self) -> str:
        """``"api_key"`` (default: bearer API keys and staff sessions) or ``"none"`` (open)."""
        return str(self._get("OJS_API_AUTH", DEFAULT_API_AUTH))

    @property
    def RESPONSE_CONTENT_TYPE(self) -> str:
        """Content type of every HTTP API response, whatever the request's ``Accept``."""
        return str(self._get("OJS_RESPONSE_CONTENT_TYPE", DEFAULT_RESPONSE_CONTENT_TYPE))

    @property
    def API_RATE_LIMIT(self) -> str | None:
        """Requests per caller on the HTTP API (``"1000/min"``); ``None``: no limit."""
        value = self._get("OJS_API_RATE_LIMIT", None)
        return None if value is None else str(value)

    @property
    def API_KEY_CACHE_SECONDS(self) -> float:
        """Seconds a verified API key is trusted before its row is read again (0: never)."""
        return float(self._get("OJS_API_KEY_CACHE_SECONDS", DEFAULT_API_KEY_CACHE_SECONDS))

    @property
    def BULK_MAX_ITEMS(self) -> int:
        """Most items one bulk request may name (413 above it)."""
        return int(self._get("OJS_BULK_MAX_ITEMS", DEFAULT_BULK_MAX_ITEMS))

    @property
    def BULK_IDEMPOTENCY_SECONDS(self) -> float:
        """Seconds the answer to a bulk request with an idempotency key is kept."""
        return float(self._get("OJS_BULK_IDEMPOTENCY_SECONDS", DEFAULT_BULK_IDEMPOTENCY_SECONDS))

    @property
    def PROGRESS_STREAM_SECONDS(self) -> float:
        """Longest a progress stream stays open, in seconds."""
        return float(self._get("OJS_PROGRESS_STREAM_SECONDS", DEFAULT_PROGRESS_STREAM_SECONDS))

    @property
    def PROGRESS_STREAM_POLL_SECONDS(self) -> float:
        """Seconds between two reads of a followed job's progress."""
        return float(
            self._get("OJS_PROGRESS_STREAM_POLL_SECONDS", DEFAULT_PROGRESS_STREAM_POLL_SECONDS)
        )

    @property
    def PROGRESS_STREAM_HEARTBEAT_SECONDS(self) -> float:
        """Seconds of silence after which a progress stream sends a heartbeat comment."""
        return float(
            self._get(
                "OJS_PROGRESS_STREAM_HEARTBEAT_SECONDS", DEFAULT_PROGRESS_STREAM_HEARTBEAT_SECONDS
            )
        )

    @property
    def MAINTENANCE_CACHE_SECONDS(self) -> float:
        """Seconds a process trusts the maintenance switch it last read (0: never)."""
        return float(self._get("OJS_MAINTENANCE_CACHE_SECONDS", DEFAULT_MAINTENANCE_CACHE_SECONDS))

    @property
    def MAX_REQUEST_BYTES(self) -> int:
        """Largest accepted HTTP request body in bytes."""
        return int(self._get("OJS_MAX_REQUEST_BYTES", DEFAULT_MAX_REQUEST_BYTES))

    @property
    def MAX_JSON_DEPTH(self) -> int:
        """Deepest nesting of arrays/objects accepted in one JSON value (args, meta, result...)."""
        return int(self._get("OJS_MAX_JSON_DEPTH", DEFAULT_MAX_JSON_DEPTH))

    @property
    def ALLOWED_JOB_TYPES(self) -> tuple[str, ...] | None:
        """Job types that may be enqueued (``type`` or ``prefix.*``); ``None``: every type."""
        value = self._get("OJS_ALLOWED_JOB_TYPES", DEFAULT_ALLOWED_JOB_TYPES)
        return None if value is None else tuple(value)

    @property
    def TENANT_REQUIRED(self) -> bool:
        """Refuse jobs without a tenant (multi-tenancy §5.1) with 422 ``tenant_required``."""
        return bool(self._get("OJS_TENANT_REQUIRED", DEFAULT_TENANT_REQUIRED))

    @property
    def TENANT_FAIRNESS(self) -> bool:
        """Hand out the jobs of a queue's tenants in turns, by weight (fair scheduling §9)."""
        return bool(self._get("OJS_TENANT_FAIRNESS", DEFAULT_TENANT_FAIRNESS))

    @property
    def TENANTS(self) -> Any:
        """Tenants configured in settings (multi-tenancy §15.1): ``{id: {"fairness_weight",
        "limits", "priority_boost"}}``, stored by the reaper when it starts."""
        return self._get("OJS_TENANTS", None)

    @property
    def TENANT_THROTTLING(self) -> Any:
        """Noisy-neighbour throttling (multi-tenancy §9.2): ``None`` (off), ``True`` or a
        dict of thresholds (``tenantlimits.THROTTLING_DEFAULTS``)."""
        return self._get("OJS_TENANT_THROTTLING", None)

    @property
    def TENANT_LIMITS_CACHE_SECONDS(self) -> float:
        """Seconds a process trusts the tenants' limits it last read (0: never)."""
        return float(
            self._get("OJS_TENANT_LIMITS_CACHE_SECONDS", DEFAULT_TENANT_LIMITS_CACHE_SECONDS)
        )

    @property
    def CRON(self) -> dict[str, dict[str, Any]]:
        """Cron jobs declared in settings: ``{name: {"cron", "type", "args", ...}}``."""
        return dict(self._get("OJS_CRON", {}) or {})

    @property
    def RESULT_TTL(self) -> int:
        """Results §6.1: seconds a completed job's result is kept (default 7 days)."""
        return int(self._get("OJS_RESULT_TTL", 7 * 86400))

    @property
    def RESULT_WAIT_MAX(self) -> float:
        """The longest blocking wait for a result over HTTP, in seconds."""
        return float(self._get("OJS_RESULT_WAIT_MAX", 60))

    @property
    def METRICS_MAX_TYPES(self) -> int:
        """Distinct ``job_type`` label values a process keeps in its metrics."""
        return int(self._get("OJS_METRICS_MAX_TYPES", 100))

    @property
    def METRICS_MAX_TENANTS(self) -> int:
        """Distinct ``tenant_id`` label values per metric family (multi-tenancy §15.4);
        the others are counted as ``_other``."""
        return int(self._get("OJS_METRICS_MAX_TENANTS", 1000))

    @property
    def ENQUEUE_MIDDLEWARE(self) -> list[Any]:
        """Enqueue middleware (dotted paths or objects), in order (middleware §3)."""
        return list(self._get("OJS_ENQUEUE_MIDDLEWARE", DEFAULT_ENQUEUE_MIDDLEWARE))

    @property
    def EXECUTION_MIDDLEWARE(self) -> list[Any]:
        """Execution middleware (dotted paths or objects), outermost first (middleware §4)."""
        return list(self._get("OJS_EXECUTION_MIDDLEWARE", DEFAULT_EXECUTION_MIDDLEWARE))

    @property
    def RETENTION(self) -> dict[str, float | None]:
        """Seconds to keep completed/cancelled/discarded/dead_letter jobs, workflows, events."""
        return {**DEFAULT_RETENTION, **(self._get("OJS_RETENTION", {}) or {})}

    @property
    def WEBHOOKS_QUEUE(self) -> str:
        """Queue of webhook delivery jobs (``OJS_WEBHOOKS_QUEUE``)."""
        return str(self._get("OJS_WEBHOOKS_QUEUE", DEFAULT_WEBHOOKS_QUEUE))

    @property
    def WEBHOOKS_TIMEOUT(self) -> float:
        """Connect and read timeout of a webhook delivery, in seconds."""
        return float(self._get("OJS_WEBHOOKS_TIMEOUT", DEFAULT_WEBHOOKS_TIMEOUT))

    @property
    def WEBHOOKS_MAX_RESPONSE_BYTES(self) -> int:
        """Bytes of an endpoint's response body read at most."""
        return int(
            self._get("OJS_WEBHOOKS_MAX_RESPONSE_BYTES", DEFAULT_WEBHOOKS_MAX_RESPONSE_BYTES)
        )

    @property
    def WEBHOOKS_ALLOW_PRIVATE(self) -> bool:
        """Allow endpoints on loopback, private, link-local and other non-public addresses."""
        return bool(self._get("OJS_WEBHOOKS_ALLOW_PRIVATE", DEFAULT_WEBHOOKS_ALLOW_PRIVATE))

    @property
    def WEBHOOKS_ALLOW_HTTP(self) -> bool:
        """Allow ``http://`` endpoints (webhooks §8.4 wants HTTPS in production)."""
        return bool(self._get("OJS_WEBHOOKS_ALLOW_HTTP", DEFAULT_WEBHOOKS_ALLOW_HTTP))

    @property
    def WEBHOOKS_SECRET_GRACE(self) -> float:
        """Seconds a rotated-out secret keeps signing deliveries."""
        return float(self._get("OJS_WEBHOOKS_SECRET_GRACE", DEFAULT_WEBHOOKS_SECRET_GRACE))

    @property
    def WEBHOOKS_RETRY(self) -> dict[str, Any]:
        """Retry policy of delivery jobs (OJS retry policy fields over the default)."""
        return {**DEFAULT_WEBHOOKS_RETRY, **(self._get("OJS_WEBHOOKS_RETRY", {}) or {})}

    @property
    def WEBHOOKS_CACHE_SECONDS(self) -> float:
        """Seconds the "any active subscription?" answer is reused by a process."""
        return float(self._get("OJS_WEBHOOKS_CACHE_SECONDS", DEFAULT_WEBHOOKS_CACHE_SECONDS))


settings = Settings()
