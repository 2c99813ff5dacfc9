"""The job store: ``Job``, ``Worker``, ``Queue`` and ``Event`` rows and their read vocabulary.

Fields, indexes, constraints and QuerySet *reads* only. Nothing here changes a job's
state: every write of ``Job.state`` and the fields that move with it is in ``lifecycle``.
"""

from __future__ import annotations

from django_ojs.models.cron import CronJob
from django_ojs.models.events import LEGACY_EVENT_ID_LAG, Event, EventQuerySet
from django_ojs.models.jobs import (
    Dashboard,
    DeadLetterJob,
    DeadLetterManager,
    Job,
    JobManager,
    JobQuerySet,
    loaded_jobs,
    unsaved_job,
    unsaved_jobs,
)
from django_ojs.models.pools import WorkerPool
from django_ojs.models.system import (
    ApiKey,
    AuditEntry,
    IdempotencyKey,
    Maintenance,
    WebhookCursor,
    WebhookSubscription,
)
from django_ojs.models.tenants import Tenant
from django_ojs.models.workers import Queue, RateLimitState, Worker, WorkerQuerySet
from django_ojs.models.workflows import Workflow

__all__ = [
    "LEGACY_EVENT_ID_LAG",
    "ApiKey",
    "AuditEntry",
    "CronJob",
    "Dashboard",
    "DeadLetterJob",
    "DeadLetterManager",
    "Event",
    "EventQuerySet",
    "IdempotencyKey",
    "Job",
    "JobManager",
    "JobQuerySet",
    "Maintenance",
    "Queue",
    "RateLimitState",
    "Tenant",
    "WebhookCursor",
    "WebhookSubscription",
    "Worker",
    "WorkerPool",
    "WorkerQuerySet",
    "Workflow",
    "loaded_jobs",
    "unsaved_job",
    "unsaved_jobs",
]
