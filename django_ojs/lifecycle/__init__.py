"""The OJS state machine: the only code that writes ``Job.state``.

Everything else (HTTP views, admin actions, management commands, the worker, the reaper)
calls these functions and imports this package only, never its modules. Each transition
is a compare-and-set inside ``transaction.atomic`` that raises
:class:`~django_ojs.exceptions.InvalidTransition` when the job is not in a state the
operation accepts (OJS core §6.3), and records its events in the same transaction.
Vendor-specific SQL is behind ``django_ojs.drivers``.
"""

from __future__ import annotations

from django_ojs.drivers.periods import INTERVALS as PARTITION_INTERVALS
from django_ojs.lifecycle.batch import ack_many, fail_many
from django_ojs.lifecycle.bulkitems import ATOMICITY as BULK_ATOMICITY
from django_ojs.lifecycle.bulkitems import Item as BulkItem
from django_ojs.lifecycle.bulkitems import bulk_change, bulk_enqueue
from django_ojs.lifecycle.bulkops import ACTIONS as BULK_ACTIONS
from django_ojs.lifecycle.bulkops import bulk
from django_ojs.lifecycle.claim import Fetch, fetch, listen
from django_ojs.lifecycle.cron import delete as delete_cron
from django_ojs.lifecycle.cron import fire_due as fire_due_cron
from django_ojs.lifecycle.cron import get as get_cron
from django_ojs.lifecycle.cron import register as register_cron
from django_ojs.lifecycle.cron import run_now as run_cron_now
from django_ojs.lifecycle.cron import set_enabled as set_cron_enabled
from django_ojs.lifecycle.cron import sync as sync_cron
from django_ojs.lifecycle.idempotency import idempotent, prune_idempotency_keys
from django_ojs.lifecycle.leadership import lead
from django_ojs.lifecycle.maintenance import BATCH as MAINTENANCE_BATCH
from django_ojs.lifecycle.maintenance import (
    expire_stale,
    promote_due,
    prune,
    purge_all,
    recover_dead_workers,
    refresh_statistics,
    rescue_expired,
)
from django_ojs.lifecycle.partitions import TABLES as PARTITION_TABLES
from django_ojs.lifecycle.partitions import layout as partition_layout
from django_ojs.lifecycle.partitions import maintain as maintain_partitions
from django_ojs.lifecycle.partitions import partition as partition_tables
from django_ojs.lifecycle.partitions import unpartition as unpartition_tables
from django_ojs.lifecycle.pools import (
    PoolFetch,
    delete_pool,
    fetch_with_policy,
    get_pool,
    pool_fetch,
    pool_loads,
    pool_summaries,
    save_pool,
    scheduling_stats,
)
from django_ojs.lifecycle.pools import forget as forget_pools
from django_ojs.lifecycle.progress import progress_of, report_progress
from django_ojs.lifecycle.push import enqueue, enqueue_many, push, push_many
from django_ojs.lifecycle.queues import (
    configure_queue,
    pause_queue,
    queue_retention,
    resume_queue,
    set_queue_limits,
    set_queue_retention,
)
from django_ojs.lifecycle.ratelimits import clear_override as clear_rate_limit_override
from django_ojs.lifecycle.ratelimits import keys as rate_limit_keys
from django_ojs.lifecycle.ratelimits import override as override_rate_limit
from django_ojs.lifecycle.ratelimits import status as rate_limit_status
from django_ojs.lifecycle.reads import ReplicaStatus, read_database, replica_status
from django_ojs.lifecycle.results import MAX_IDS as RESULTS_MAX_IDS
from django_ojs.lifecycle.results import outcome as result_outcome
from django_ojs.lifecycle.results import prune_results, results, wait
from django_ojs.lifecycle.settle import (
    ack,
    activate,
    cancel,
    delete_discarded,
    discard,
    fail,
    purge,
    retry_discarded,
    retry_failed_steps,
    run_now,
)
from django_ojs.lifecycle.store import backend
from django_ojs.lifecycle.store import db as database
from django_ojs.lifecycle.system import (
    MaintenanceStatus,
    forget_maintenance,
    in_maintenance,
    maintenance_status,
    set_maintenance,
)
from django_ojs.lifecycle.tenantlimits import forget_tenant_limits, tenant_limits
from django_ojs.lifecycle.tenants import (
    PAGE_EXACT_COUNT_UP_TO,
    TenantSummary,
    WaitingJob,
    delete_tenant,
    detect_noisy_neighbours,
    limits_wire,
    oldest_available,
    release_throttle,
    set_limits,
    set_tenant,
    sync_tenants,
    tenant_ids,
    tenant_page,
    tenant_stats,
    tenant_summaries,
    tenant_throttle,
    throttle_of,
    throttle_tenant,
    weight_of,
)
from django_ojs.lifecycle.webhooks import any_active as any_active_webhook
from django_ojs.lifecycle.webhooks import check_url as check_webhook_url
from django_ojs.lifecycle.webhooks import create as create_webhook
from django_ojs.lifecycle.webhooks import delete as delete_webhook
from django_ojs.lifecycle.webhooks import dispatch as dispatch_webhooks
from django_ojs.lifecycle.webhooks import forget as forget_webhooks
from django_ojs.lifecycle.webhooks import get as get_webhook
from django_ojs.lifecycle.webhooks import parse_id as parse_webhook_id
from django_ojs.lifecycle.webhooks import record_delivery as record_webhook_delivery
from django_ojs.lifecycle.webhooks import rotate_secret as rotate_webhook_secret
from django_ojs.lifecycle.webhooks import update as update_webhook
from django_ojs.lifecycle.workers import Heartbeat, beat, deregister, register, set_directive
from django_ojs.lifecycle.workflows import KINDS as WORKFLOW_KINDS
from django_ojs.lifecycle.workflows import MAX_DEPTH as WORKFLOW_MAX_DEPTH
from django_ojs.lifecycle.workflows import WorkflowSpec, job_spec
from django_ojs.lifecycle.workflows import cancel as cancel_workflow
from django_ojs.lifecycle.workflows import create as create_workflow
from django_ojs.lifecycle.workflows import create_spec as create_workflow_spec
from django_ojs.lifecycle.workflows import get as get_workflow
from django_ojs.lifecycle.workflows import tree as workflow_tree

__all__ = [
    "BULK_ACTIONS",
    "BULK_ATOMICITY",
    "MAINTENANCE_BATCH",
    "PAGE_EXACT_COUNT_UP_TO",
    "PARTITION_INTERVALS",
    "PARTITION_TABLES",
    "RESULTS_MAX_IDS",
    "WORKFLOW_KINDS",
    "WORKFLOW_MAX_DEPTH",
    "BulkItem",
    "Fetch",
    "Heartbeat",
    "MaintenanceStatus",
    "PoolFetch",
    "ReplicaStatus",
    "TenantSummary",
    "WaitingJob",
    "WorkflowSpec",
    "ack",
    "ack_many",
    "activate",
    "any_active_webhook",
    "backend",
    "beat",
    "bulk",
    "bulk_change",
    "bulk_enqueue",
    "cancel",
    "cancel_workflow",
    "check_webhook_url",
    "clear_rate_limit_override",
    "configure_queue",
    "create_webhook",
    "create_workflow",
    "create_workflow_spec",
    "database",
    "delete_cron",
    "delete_discarded",
    "delete_pool",
    "delete_tenant",
    "delete_webhook",
    "deregister",
    "detect_noisy_neighbours",
    "discard",
    "dispatch_webhooks",
    "enqueue",
    "enqueue_many",
    "expire_stale",
    "fail",
    "fail_many",
    "fetch",
    "fetch_with_policy",
    "fire_due_cron",
    "forget_maintenance",
    "forget_pools",
    "forget_tenant_limits",
    "forget_webhooks",
    "get_cron",
    "get_pool",
    "get_webhook",
    "get_workflow",
    "idempotent",
    "in_maintenance",
    "job_spec",
    "lead",
    "limits_wire",
    "listen",
    "maintain_partitions",
    "maintenance_status",
    "oldest_available",
    "override_rate_limit",
    "parse_webhook_id",
    "partition_layout",
    "partition_tables",
    "pause_queue",
    "pool_fetch",
    "pool_loads",
    "pool_summaries",
    "progress_of",
    "promote_due",
    "prune",
    "prune_idempotency_keys",
    "prune_results",
    "purge",
    "purge_all",
    "push",
    "push_many",
    "queue_retention",
    "rate_limit_keys",
    "rate_limit_status",
    "read_database",
    "record_webhook_delivery",
    "recover_dead_workers",
    "refresh_statistics",
    "register",
    "register_cron",
    "release_throttle",
    "replica_status",
    "report_progress",
    "rescue_expired",
    "result_outcome",
    "results",
    "resume_queue",
    "retry_discarded",
    "retry_failed_steps",
    "rotate_webhook_secret",
    "run_cron_now",
    "run_now",
    "save_pool",
    "scheduling_stats",
    "set_cron_enabled",
    "set_directive",
    "set_limits",
    "set_maintenance",
    "set_queue_limits",
    "set_queue_retention",
    "set_tenant",
    "sync_cron",
    "sync_tenants",
    "tenant_ids",
    "tenant_limits",
    "tenant_page",
    "tenant_stats",
    "tenant_summaries",
    "tenant_throttle",
    "throttle_of",
    "throttle_tenant",
    "unpartition_tables",
    "update_webhook",
    "wait",
    "weight_of",
    "workflow_tree",
]
