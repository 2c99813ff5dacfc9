"""Workflows (OJS workflows §4-§10): one row per chain, group or batch, nested or not."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from django_ojs.ids import uuid7


class Workflow(models.Model):
    """A chain, group or batch of jobs (OJS workflows §4-§6) and its exact counters.

    Counters and ``state`` are written only by ``lifecycle.workflows``, under the row lock,
    in the same transaction as the member job's terminal transition.
    """

    KINDS = ("chain", "group", "batch")
    STATES = ("pending", "running", "completed", "failed", "cancelled")

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=16, choices=[(k, k) for k in KINDS])
    name = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=16, choices=[(s, s) for s in STATES], default="running")
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    #: ``{"on_complete"|"on_success"|"on_failure": <job wire dict>}`` (batch only).
    callbacks = models.JSONField(default=dict, blank=True)
    #: The callback kinds already enqueued (each fires at most once, §6.5).
    fired = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    #: §9.6: ``{failed_step_index?, failed_job_ids, errors}`` once a member or callback failed.
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # Nesting (workflows §10): a workflow that is a step (chain) or member (group, batch) of
    # another. ``root`` is the outermost workflow (NULL on the outermost itself), ``depth``
    # 0 there. A nested workflow waits in ``pending`` until its parent starts it, with the
    # upstream results it was given in ``parent_results``; ``result`` is what it hands on.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_step = models.IntegerField(null=True, blank=True)
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="descendants"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    parent_results = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ojs_workflow"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["state", "finished_at"], name="ojs_workflow_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name or self.id}"

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.cancelled
