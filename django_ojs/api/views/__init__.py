"""One view per OJS endpoint, by resource. Each parses, makes one core call, renders."""

from __future__ import annotations

from django_ojs.api.views.base import NotFoundView, OJSView
from django_ojs.api.views.bulk import (
    BulkCancelView,
    BulkDeleteView,
    BulkEnqueueView,
    BulkRetryView,
)
from django_ojs.api.views.cron import CronDetailView, CronListView
from django_ojs.api.views.dead_letter import (
    DeadLetterBulkRetryView,
    DeadLetterDetailView,
    DeadLetterListView,
    DeadLetterRetryView,
    DeadLetterStatsView,
)
from django_ojs.api.views.events import EventListView
from django_ojs.api.views.jobs import (
    JobActivateView,
    JobBatchView,
    JobDetailView,
    JobListView,
    JobResultsView,
    JobResultView,
)
from django_ojs.api.views.queues import (
    QueueConfigView,
    QueueDetailView,
    QueueListView,
    QueuePauseView,
    QueueResumeView,
    QueueStatsView,
)
from django_ojs.api.views.ratelimits import RateLimitDetailView, RateLimitListView
from django_ojs.api.views.system import HealthView, ManifestView, MetricsView, ReadyView
from django_ojs.api.views.webhooks import (
    WebhookDeliveryDetailView,
    WebhookDeliveryListView,
    WebhookDeliveryRetryView,
    WebhookRotateSecretView,
    WebhookSubscriptionDetailView,
    WebhookSubscriptionListView,
    WebhookTestView,
)
from django_ojs.api.views.workers import (
    AckView,
    FetchView,
    HeartbeatView,
    NackView,
    ProgressStreamView,
    ProgressView,
)
from django_ojs.api.views.workflows import WorkflowDetailView, WorkflowListView

__all__ = [
    "AckView",
    "BulkCancelView",
    "BulkDeleteView",
    "BulkEnqueueView",
    "BulkRetryView",
    "CronDetailView",
    "CronListView",
    "DeadLetterBulkRetryView",
    "DeadLetterDetailView",
    "DeadLetterListView",
    "DeadLetterRetryView",
    "DeadLetterStatsView",
    "EventListView",
    "FetchView",
    "HealthView",
    "HeartbeatView",
    "JobActivateView",
    "JobBatchView",
    "JobDetailView",
    "JobListView",
    "JobResultView",
    "JobResultsView",
    "ManifestView",
    "MetricsView",
    "NackView",
    "NotFoundView",
    "OJSView",
    "ProgressStreamView",
    "ProgressView",
    "QueueConfigView",
    "QueueDetailView",
    "QueueListView",
    "QueuePauseView",
    "QueueResumeView",
    "QueueStatsView",
    "RateLimitDetailView",
    "RateLimitListView",
    "ReadyView",
    "WebhookDeliveryDetailView",
    "WebhookDeliveryListView",
    "WebhookDeliveryRetryView",
    "WebhookRotateSecretView",
    "WebhookSubscriptionDetailView",
    "WebhookSubscriptionListView",
    "WebhookTestView",
    "WorkflowDetailView",
    "WorkflowListView",
]
