"""Cron jobs (OJS cron): a schedule and the job it enqueues."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

_now = timezone.now


class CronJob(models.Model):
    """A periodic job (OJS cron extension §2): fires ``type``/``args`` on a schedule.

    ``next_run_at`` is the next slot; the evaluator that moves it forward (a
    compare-and-set on its current value) is the one that enqueues the slot's job, in the
    same transaction: one job per slot with any number of workers and no leader.
    """

    class Overlap(models.TextChoices):
        SKIP = "skip"
        ALLOW = "allow"
        CANCEL_PREVIOUS = "cancel_previous"
        ENQUEUE = "enqueue"

    class Origin(models.TextChoices):
        API = "api", "HTTP API or admin"
        SETTINGS = "settings", "OJS_CRON setting"
        CODE = "code", "@periodic decorator"

    name = models.CharField(max_length=255, primary_key=True)
    expression = models.CharField(max_length=255)
    timezone = models.CharField(max_length=64, default="UTC")
    type = models.CharField(max_length=255)
    args = models.JSONField(default=list, blank=True)
    #: Job options as the enqueue request's ``options`` (queue, priority, retry, meta...).
    options = models.JSONField(default=dict, blank=True)
    overlap_policy = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.SKIP)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="")
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.API)
    #: The next slot (UTC); NULL while disabled (§2.2).
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.UUIDField(null=True, blank=True)
    run_count = models.PositiveBigIntegerField(default=0)
    skip_count = models.PositiveBigIntegerField(default=0)
    # ``timezone`` above is a field: the clock is reached through the module's alias.
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        db_table = "ojs_cron"
        ordering = ["name"]
        verbose_name = "cron job"
        indexes = [
            models.Index(
                fields=["next_run_at"], name="ojs_cron_due_idx", condition=Q(enabled=True)
            ),
        ]
        permissions = [("run_cron_now", "Can run cron jobs now")]

    def __str__(self) -> str:
        return self.name
