"""Routes of the OJS HTTP binding, relative to where the project mounts ``django_ojs.urls``.

``manifest`` and ``v1/...`` (HB §3.1, Appendix A). No trailing slashes; anything else under
the mount point is an OJS 404 (the last pattern), never an HTML page or a redirect, except
``admin/...``: the official admin UI's pages when ``OJS_ADMIN_UI_DIR`` is set.
"""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, include, path, re_path

from django_ojs.api import views
from django_ojs.api.views import admin as admin_views
from django_ojs.api.views import admin_system, admin_tenants
from django_ojs.api.views import pools as pool_views
from django_ojs.api.views.admin_ui import admin_ui

# Django tries the routes in order, and a route that does not match costs a few µs: the
# worker protocol's and the enqueue's routes, the busiest, come first (URL resolution
# was 6-9 % of an ACK's CPU with 18 routes tried before it).
v1: list[URLPattern | URLResolver] = [
    path("workers/fetch", views.FetchView.as_view(), name="worker-fetch"),
    path("workers/ack", views.AckView.as_view(), name="worker-ack"),
    path("workers/nack", views.NackView.as_view(), name="worker-nack"),
    path("workers/heartbeat", views.HeartbeatView.as_view(), name="worker-heartbeat"),
    path("jobs", views.JobListView.as_view(), name="job-list"),
    path("jobs/batch", views.JobBatchView.as_view(), name="job-batch"),
    path("health", views.HealthView.as_view(), name="health"),
    path("ready", views.ReadyView.as_view(), name="ready"),
    path("jobs/bulk", views.BulkEnqueueView.as_view(), name="job-bulk"),
    path("jobs/bulk/cancel", views.BulkCancelView.as_view(), name="job-bulk-cancel"),
    path("jobs/bulk/retry", views.BulkRetryView.as_view(), name="job-bulk-retry"),
    path("jobs/bulk/delete", views.BulkDeleteView.as_view(), name="job-bulk-delete"),
    path("jobs/results", views.JobResultsView.as_view(), name="job-results"),
    path("jobs/<str:job_id>", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/activate", views.JobActivateView.as_view(), name="job-activate"),
    path("jobs/<str:job_id>/result", views.JobResultView.as_view(), name="job-result"),
    path("jobs/<str:job_id>/progress", views.ProgressView.as_view(), name="job-progress"),
    path(
        "jobs/<str:job_id>/progress/stream",
        views.ProgressStreamView.as_view(),
        name="job-progress-stream",
    ),
    path("workers/progress", views.ProgressView.as_view(), name="worker-progress"),
    path("queues", views.QueueListView.as_view(), name="queue-list"),
    path("queues/<str:name>/stats", views.QueueStatsView.as_view(), name="queue-stats"),
    path("queues/<str:name>/pause", views.QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:name>/resume", views.QueueResumeView.as_view(), name="queue-resume"),
    path("queues/<str:name>/config", views.QueueConfigView.as_view(), name="queue-config"),
    # After its sub-resources: <str:> never matches a "/", so the order only saves tries.
    path("queues/<str:name>", views.QueueDetailView.as_view(), name="queue-detail"),
    path("dead-letter", views.DeadLetterListView.as_view(), name="dead-letter-list"),
    path("dead-letter/stats", views.DeadLetterStatsView.as_view(), name="dead-letter-stats"),
    path(
        "dead-letter/retry",
        views.DeadLetterBulkRetryView.as_view(),
        name="dead-letter-bulk-retry",
    ),
    path(
        "dead-letter/<str:job_id>", views.DeadLetterDetailView.as_view(), name="dead-letter-detail"
    ),
    path(
        "dead-letter/<str:job_id>/retry",
        views.DeadLetterRetryView.as_view(),
        name="dead-letter-retry",
    ),
    path("events", views.EventListView.as_view(), name="event-list"),
    path("rate-limits", views.RateLimitListView.as_view(), name="rate-limit-list"),
    path("rate-limits/<str:key>", views.RateLimitDetailView.as_view(), name="rate-limit-detail"),
    path("cron", views.CronListView.as_view(), name="cron-list"),
    path("cron/<str:name>", views.CronDetailView.as_view(), name="cron-detail"),
    path("workflows", views.WorkflowListView.as_view(), name="workflow-list"),
    path(
        "workflows/<str:workflow_id>",
        views.WorkflowDetailView.as_view(),
        name="workflow-detail",
    ),
]

webhooks = [
    path("subscriptions", views.WebhookSubscriptionListView.as_view(), name="webhook-list"),
    path(
        "subscriptions/<str:subscription_id>",
        views.WebhookSubscriptionDetailView.as_view(),
        name="webhook-detail",
    ),
    path(
        "subscriptions/<str:subscription_id>/test",
        views.WebhookTestView.as_view(),
        name="webhook-test",
    ),
    path(
        "subscriptions/<str:subscription_id>/rotate-secret",
        views.WebhookRotateSecretView.as_view(),
        name="webhook-rotate-secret",
    ),
    path("deliveries", views.WebhookDeliveryListView.as_view(), name="webhook-delivery-list"),
    path(
        "deliveries/<str:delivery_id>",
        views.WebhookDeliveryDetailView.as_view(),
        name="webhook-delivery-detail",
    ),
    path(
        "deliveries/<str:delivery_id>/retry",
        views.WebhookDeliveryRetryView.as_view(),
        name="webhook-delivery-retry",
    ),
]
v1.append(path("webhooks/", include(webhooks)))

admin = [
    path("stats", admin_views.StatsView.as_view(), name="admin-stats"),
    path("stats/history", admin_views.StatsHistoryView.as_view(), name="admin-stats-history"),
    path("queues", admin_views.QueuesView.as_view(), name="admin-queues"),
    path("queues/<str:name>", admin_views.QueueView.as_view(), name="admin-queue"),
    path("queues/<str:name>/pause", admin_views.QueuePauseView.as_view(), name="admin-pause"),
    path("queues/<str:name>/resume", admin_views.QueueResumeView.as_view(), name="admin-resume"),
    path("queues/<str:name>/jobs", admin_views.QueueJobsView.as_view(), name="admin-purge"),
    path("queues/<str:name>/config", views.QueueConfigView.as_view(), name="admin-queue-config"),
    path("jobs", admin_views.JobsView.as_view(), name="admin-jobs"),
    path("jobs/bulk/<str:action>", admin_views.JobsBulkView.as_view(), name="admin-bulk"),
    path("jobs/<str:job_id>", admin_views.JobView.as_view(), name="admin-job"),
    path("jobs/<str:job_id>/cancel", admin_views.JobCancelView.as_view(), name="admin-cancel"),
    path("jobs/<str:job_id>/retry", admin_views.JobRetryView.as_view(), name="admin-retry"),
    path("workers", admin_views.WorkersView.as_view(), name="admin-workers"),
    path("workers/<str:worker_id>", admin_views.WorkerView.as_view(), name="admin-worker"),
    path(
        "workers/<str:worker_id>/quiet",
        admin_views.WorkerQuietView.as_view(),
        name="admin-worker-quiet",
    ),
    path("dead-letter", admin_views.DeadLetterView.as_view(), name="admin-dead-letter"),
    path(
        "dead-letter/stats",
        admin_views.DeadLetterStatsView.as_view(),
        name="admin-dead-letter-stats",
    ),
    path(
        "dead-letter/retry",
        admin_views.DeadLetterBulkRetryView.as_view(),
        name="admin-dead-letter-bulk-retry",
    ),
    path(
        "dead-letter/<str:job_id>",
        admin_views.DeadLetterJobView.as_view(),
        name="admin-dead-letter-job",
    ),
    path(
        "dead-letter/<str:job_id>/retry",
        admin_views.DeadLetterRetryView.as_view(),
        name="admin-dead-letter-retry",
    ),
    path("pools", pool_views.PoolsView.as_view(), name="admin-pools"),
    path("pools/<str:name>", pool_views.PoolView.as_view(), name="admin-pool"),
    path(
        "scheduling/stats",
        pool_views.SchedulingStatsView.as_view(),
        name="admin-scheduling-stats",
    ),
    path("tenants", admin_tenants.TenantsView.as_view(), name="admin-tenants"),
    path("tenants/<str:tenant_id>", admin_tenants.TenantDetailView.as_view(), name="admin-tenant"),
    path(
        "tenants/<str:tenant_id>/stats",
        admin_tenants.TenantStatsView.as_view(),
        name="admin-tenant-stats",
    ),
    path(
        "tenants/<str:tenant_id>/limits",
        admin_tenants.TenantLimitsView.as_view(),
        name="admin-tenant-limits",
    ),
    path(
        "tenants/<str:tenant_id>/throttle",
        admin_tenants.TenantThrottleView.as_view(),
        name="admin-tenant-throttle",
    ),
    path(
        "tenants/<str:tenant_id>/jobs",
        admin_tenants.TenantJobsView.as_view(),
        name="admin-tenant-jobs",
    ),
    path("system/config", admin_system.SystemConfigView.as_view(), name="admin-system-config"),
    path(
        "system/maintenance",
        admin_system.MaintenanceView.as_view(),
        name="admin-system-maintenance",
    ),
]
v1.append(path("admin/", include(admin)))

urlpatterns = [
    path("v1/", include(v1)),
    path("manifest", views.ManifestView.as_view(), name="manifest"),
    path("metrics", views.MetricsView.as_view(), name="metrics"),
    # The official admin UI (OJS_ADMIN_UI_DIR): its files and the app's deep links.
    path("admin", admin_ui, name="admin-ui-root"),
    path("admin/", admin_ui, name="admin-ui"),
    path("admin/<path:path>", admin_ui, name="admin-ui-path"),
    re_path(r"^.*$", views.NotFoundView.as_view(), name="not-found"),
]
