"""The operator console in the Django admin: jobs, dead letter, workers, queues, dashboard,
API keys, tenants, workflows, webhook subscriptions, and the audit trail.

Adapter code only: every action parses the selection, makes one ``django_ojs.lifecycle``
(or ``django_ojs.queues``) call per object and reports what happened. No ORM writes, no
transactions and no state decisions here: the core refuses what a state does not allow.
"""

from __future__ import annotations

from django_ojs.admin import (
    apikeys,
    audit,
    cron,
    dashboard,
    dead_letter,
    jobs,
    pools,
    queues,
    tenants,
    webhooks,
    workers,
    workflows,
)

__all__ = [
    "apikeys",
    "audit",
    "cron",
    "dashboard",
    "dead_letter",
    "jobs",
    "pools",
    "queues",
    "tenants",
    "webhooks",
    "workers",
    "workflows",
]
