"""Workers, queues and the rate-limit state of their keys."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.utils import timezone


class WorkerQuerySet(models.QuerySet["Worker"]):
    def stale(self, before: datetime) -> WorkerQuerySet:
        """Workers whose last heartbeat is older than ``before``."""
        return self.filter(last_heartbeat_at__lt=before)


class Worker(models.Model):
    """A worker process known to the server (worker protocol §3-§4)."""

    class Directive(models.TextChoices):
        NONE = "", "running"
        QUIET = "quiet", "quiet"
        TERMINATE = "terminate", "terminate"

    id = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    queues = models.JSONField(default=list, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    labels = models.JSONField(default=list, blank=True)
    #: The worker pool it joined (fair scheduling §6.2), or "".
    pool = models.CharField(max_length=128, blank=True, default="", db_index=True)
    #: What the worker last reported: running, quiet or terminate.
    state = models.CharField(max_length=16, default="running")
    #: What the operator wants; delivered in the next heartbeat reply.
    directive = models.CharField(max_length=16, choices=Directive.choices, default="", blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat_at = models.DateTimeField(default=timezone.now)
    active_job_ids = models.JSONField(default=list, blank=True)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "ojs_worker"
        ordering = ["-last_heartbeat_at"]
        permissions = [("direct_worker", "Can quiet or terminate workers")]

    def __str__(self) -> str:
        return self.id


class Queue(models.Model):
    """A named queue; created on first enqueue. Paused queues are not fetched from."""

    name = models.CharField(max_length=128, primary_key=True)
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: Queue-level limit (rate-limiting §7.2): ``{"concurrency": N}``; NULL = none.
    limits = models.JSONField(null=True, blank=True)
    #: Retention override (queue config §6.3): seconds per kind (``completed``,
    #: ``discarded``, ``cancelled``); a kind not in it, or NULL, follows ``OJS_RETENTION``.
    retention = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ojs_queue"
        ordering = ["name"]
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return self.name


class RateLimitState(models.Model):
    """Per rate-limit key: whether it holds jobs back (§11.1 events) and any override."""

    key = models.CharField(max_length=255, primary_key=True)
    held = models.BooleanField(default=False)
    changed_at = models.DateTimeField(default=timezone.now)
    #: An operator's override of the key's limits (rate-limiting §10.2), until a time.
    override = models.JSONField(null=True, blank=True)
    override_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ojs_rate_limit_state"

    def __str__(self) -> str:
        return self.key
