"""Tenants (OJS multi-tenancy §8.1, fair scheduling §9.2): the configuration of a tenant.

A tenant exists as soon as one of its jobs does (the job's ``tenant`` column); a row here
is only needed to give it a weight other than 1. Written by ``lifecycle.tenants``.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

#: The weight of a tenant without a row (fair scheduling §9.2 ``default_weight``).
DEFAULT_WEIGHT = 1.0


class Tenant(models.Model):
    """A tenant's fairness weight: its share of a queue's claims against the others'."""

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
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "ojs_tenant"
        ordering = ["tenant_id"]

    def __str__(self) -> str:
        return self.tenant_id
