"""Worker pools (OJS fair scheduling §6): named groups of queues with their own strategy."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class WorkerPool(models.Model):
    """A named pool of queues that workers join (``ojs_worker --pool NAME``, or ``pool`` in
    an HTTP worker's fetch or heartbeat). Its fetches choose among its queues by
    ``strategy`` (``django_ojs.scheduling``). Written by ``lifecycle`` only."""

    class Strategy(models.TextChoices):
        STRICT = "strict", "strict (in order)"
        ROUND_ROBIN = "round-robin", "round-robin"
        WEIGHTED = "weighted", "weighted"
        LEAST_LOADED = "least-loaded", "least-loaded (deepest backlog first)"

    name = models.CharField(max_length=128, primary_key=True)
    #: Queue names, in the pool's order.
    queues = models.JSONField(default=list)
    strategy = models.CharField(
        max_length=16, choices=Strategy.choices, default=Strategy.ROUND_ROBIN
    )
    #: ``{"queue": weight}`` for the ``weighted`` strategy (a queue left out weighs 1).
    weights = models.JSONField(default=dict, blank=True)
    #: Most jobs active at once across the pool's workers; NULL: no limit.
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    #: §8.1 starvation prevention.
    starvation_enabled = models.BooleanField(default=False)
    rotation_interval = models.FloatField(default=30.0, help_text="Seconds.")
    min_dispatch_ratio = models.FloatField(default=0.05)
    #: §6.3 pool isolation: the pool's queues are dispatched to its own workers only.
    isolated = models.BooleanField(default=False)
    #: Since when every slot of the pool-wide ``concurrency`` has been taken while jobs
    #: waited (§11.1 ``scheduling.pool_overloaded`` was emitted then); NULL: not so.
    overloaded_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "ojs_worker_pool"
        ordering = ["name"]
        verbose_name = "worker pool"

    def __str__(self) -> str:
        return self.name
