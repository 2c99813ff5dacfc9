"""Tenants (OJS multi-tenancy §8.1, fair scheduling §9.2): the configuration of a tenant.

A tenant exists as soon as one of its jobs does (the job's ``tenant`` column); a row here
is only needed to give it a weight other than 1, limits (§8) or a throttle (§9). Written
by ``lifecycle.tenants`` and ``lifecycle.tenantlimits``.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

#: The weight of a tenant without a row (fair scheduling §9.2 ``default_weight``).
DEFAULT_WEIGHT = 1.0


#: Multi-tenancy §15.5: a hard quota refuses what exceeds it; a soft one lets it through
#: and reports it (the ``tenant.limit_exceeded`` event).
QUOTAS = (("hard", "hard: refuse"), ("soft", "soft: allow and report"))


class Tenant(models.Model):
    """A tenant's configuration: its fairness weight (its share of a queue's claims against
    the others'), its limits and, while a noisy neighbour, its throttle."""

    tenant_id = models.CharField(
        max_length=255,
        primary_key=True,
        validators=[RegexValidator(r"^[a-zA-Z0-9][a-zA-Z0-9._:-]*\Z")],  # multi-tenancy §5.2
    )
    #: Weighted fairness (multi-tenancy §7.2): a tenant of weight 10 is handed ten jobs
    #: for every one of a tenant of weight 1, when both have jobs waiting in a queue.
    weight = models.FloatField(
        default=DEFAULT_WEIGHT,
        validators=[MinValueValidator(0.000001), MaxValueValidator(1_000_000)],
    )
    # Limits (multi-tenancy §8.1); None: none.
    #: Its jobs active at once, across every queue: claims hold back the others.
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    #: Its jobs available and scheduled at once: an enqueue beyond it is refused (§8.2).
    max_queue_depth = models.PositiveBigIntegerField(null=True, blank=True)
    #: Its scheduled jobs at once: an enqueue beyond it is refused.
    max_scheduled = models.PositiveBigIntegerField(null=True, blank=True)
    #: At most ``enqueue_rate_limit`` jobs enqueued per ``enqueue_rate_period_ms``.
    enqueue_rate_limit = models.PositiveIntegerField(null=True, blank=True)
    enqueue_rate_period_ms = models.PositiveBigIntegerField(
        "enqueue rate period (ms)", null=True, blank=True
    )
    #: Added to the priority of each job it enqueues (§8.1 ``priority_boost``).
    priority_boost = models.IntegerField(default=0)
    quota = models.CharField(max_length=8, choices=QUOTAS, default="hard")
    # The enqueue rate's current window: when it began and how many jobs it took.
    enqueue_window_start = models.DateTimeField(null=True, blank=True, editable=False)
    enqueue_window_count = models.PositiveBigIntegerField(default=0, editable=False)
    # Noisy-neighbour throttling (§9.2): until ``throttled_until``, its weight is
    # ``throttled_weight`` and its jobs running at once at most ``throttled_concurrency``
    # (each when set), by the reaper's detection or an operator.
    throttled_weight = models.FloatField(null=True, blank=True)
    throttled_concurrency = models.PositiveIntegerField(null=True, blank=True)
    throttled_until = models.DateTimeField(null=True, blank=True)
    throttle_reason = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "ojs_tenant"
        ordering = ["tenant_id"]

    def __str__(self) -> str:
        return self.tenant_id
