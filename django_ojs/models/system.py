"""What runs the job store: API keys, the audit trail, maintenance mode, bulk requests'
idempotency keys and webhook subscriptions.
"""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils import timezone

from django_ojs.ids import uuid7


class Maintenance(models.Model):
    """The maintenance switch (OJS admin API §12.1): one row (``id`` 1), or none (off).

    While ``enabled``, fetches claim nothing, the reaper promotes no scheduled job and
    fires no cron entry; enqueueing is still accepted. Written by
    ``lifecycle.set_maintenance`` only; read through ``lifecycle.in_maintenance`` (a short
    per-process cache, ``OJS_MAINTENANCE_CACHE_SECONDS``).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    enabled = models.BooleanField(default=False)
    reason = models.CharField(max_length=500, blank=True, default="")
    enabled_at = models.DateTimeField(null=True, blank=True)
    #: ``enabled_at`` + the ``estimated_duration`` given; informative only (nothing ends
    #: maintenance by itself).
    estimated_end = models.DateTimeField(null=True, blank=True)
    #: Who switched it last (the audit trail has the whole history).
    changed_by = models.CharField(max_length=255, blank=True, default="")
    changed_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[Maintenance]] = models.Manager()

    class Meta:
        db_table = "ojs_maintenance"
        default_permissions = ("view",)
        permissions = [("switch_maintenance", "Can switch maintenance mode on and off")]
        verbose_name = "maintenance mode"
        verbose_name_plural = "maintenance mode"

    def __str__(self) -> str:
        return "maintenance on" if self.enabled else "maintenance off"


class IdempotencyKey(models.Model):
    """The stored answer to a bulk request sent with an idempotency key (bulk operations
    §10): the same key and body within ``OJS_BULK_IDEMPOTENCY_SECONDS`` get this answer
    again; the same key with another body is a conflict. Keys are scoped per operation.

    Written by ``lifecycle.idempotent`` only; deleted by the reaper once expired.
    """

    operation = models.CharField(max_length=16)
    key = models.CharField(max_length=256)
    #: SHA-256 of the request body in canonical JSON (without the key itself).
    fingerprint = models.CharField(max_length=64)
    #: ``None`` while the first request is being processed.
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects: ClassVar[models.Manager[IdempotencyKey]] = models.Manager()

    class Meta:
        db_table = "ojs_idempotency_key"
        constraints = [
            models.UniqueConstraint(fields=["operation", "key"], name="ojs_idempotency_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.operation}:{self.key}"


class ApiKey(models.Model):
    """A bearer credential for the OJS HTTP API (``manage.py ojs_apikey create``).

    Only a scrypt hash of the secret is stored (OJS security SEC-020); ``prefix`` is the
    public key id shown in lists. Created, verified and revoked by ``django_ojs.apikeys``.
    """

    class Scope(models.TextChoices):
        """The roles of OJS security §7.3; what each may call is ``api.permissions.ROLES``."""

        PRODUCER = "producer", "producer (enqueue only)"
        WORKER = "worker", "worker (fetch, ack, nack, heartbeat, progress)"
        OPERATOR = "operator", "operator (enqueue, inspect, cancel, list queues, dead letter)"
        ADMIN = "admin", "admin (every endpoint)"

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed_secret = models.CharField(max_length=255, editable=False)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    #: Queues the key may use (names, or ``prefix*``); empty: every queue (security §7.1).
    queues = models.JSONField(default=list, blank=True)
    #: Tenants whose jobs the key may enqueue, fetch, read and cancel (multi-tenancy §5);
    #: empty: every tenant, and jobs without one.
    tenants = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "ojs_apikey"
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} (ojs_{self.prefix}_…, {self.scope})"

    @property
    def principal(self) -> str:
        """How logs and the audit trail name the key: ``apikey:<name> (ojs_<prefix>_…)``."""
        return f"apikey:{self.name} (ojs_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class AuditEntry(models.Model):
    """One operator or admin action, who did it and from where (OJS security §11).

    Written by the lifecycle in the action's transaction (``lifecycle/audit.py``), so an
    entry exists exactly when the action happened. Append-only: never changed or deleted
    by django-ojs (prune it yourself if you must).
    """

    class Source(models.TextChoices):
        HTTP = "http", "HTTP API"
        ADMIN = "admin", "Django admin"
        COMMAND = "command", "management command"
        PYTHON = "python", "Python API"

    time = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    #: ``apikey:<name> (ojs_<prefix>_…)``, ``admin:<username>``: never a secret.
    actor = models.CharField(max_length=255, db_index=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    #: ``job.cancel``, ``dead_letter.retry``, ``queue.pause``, ``worker.quiet``...
    action = models.CharField(max_length=64, db_index=True)
    queue = models.CharField(max_length=255, blank=True, default="")
    job_ids = models.JSONField(default=list, blank=True)
    worker_id = models.CharField(max_length=255, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    source_ip = models.CharField(max_length=64, blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        db_table = "ojs_audit"
        ordering = ["-time", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"


class WebhookSubscription(models.Model):
    """A webhook endpoint and the events it receives (OJS webhooks §5.1).

    The secrets sign deliveries (webhooks §8.1); the previous one keeps signing until
    ``previous_secret_expires_at`` after a rotation (§8.3). ``since_seq`` is the last
    event ``seq`` stored when the subscription was made: it receives the events after it.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    url = models.CharField(max_length=2048)
    events = models.JSONField(default=list)
    #: ``{"queues": [...], "job_types": [...]}``, each optional (webhooks §5.2).
    filter = models.JSONField(default=dict, blank=True)
    active = models.BooleanField(default=True)
    secret = models.CharField(max_length=255, editable=False)
    previous_secret = models.CharField(max_length=255, blank=True, default="", editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    metadata = models.JSONField(default=dict, blank=True)
    since_seq = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    last_delivery_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_delivery_status = models.IntegerField(null=True, blank=True, editable=False)
    #: Failed attempts since the last successful delivery.
    failure_count = models.IntegerField(default=0, editable=False)

    class Meta:
        db_table = "ojs_webhook_subscription"
        ordering = ["created_at", "id"]
        verbose_name = "webhook subscription"

    def __str__(self) -> str:
        return f"{self.url} ({', '.join(map(str, self.events))})"

    @property
    def public_id(self) -> str:
        """The id as the HTTP API shows it (``sub_<uuid>``, webhooks §5.1)."""
        return f"sub_{self.id}"


class WebhookCursor(models.Model):
    """How far the webhook dispatcher has read ``ojs_event`` (one row, ``id=1``)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)

    class Meta:
        db_table = "ojs_webhook_cursor"

    def __str__(self) -> str:
        return f"webhook cursor at event {self.seq}"
