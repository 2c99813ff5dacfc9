"""django-ojs: Open Job Spec background jobs for Django.

The public Python API, re-exported lazily (importing ``django_ojs`` must not touch models
before Django's app registry is ready)::

    import django_ojs
    django_ojs.enqueue("email.send", ["ada@example.com"], queue="email")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "1.0.0"

__all__ = [
    "Batch",
    "Chain",
    "Group",
    "InvalidTransition",
    "JobContext",
    "JobError",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "OJSError",
    "RetryPolicy",
    "ValidationError",
    "__version__",
    "ack",
    "activate",
    "batch",
    "beat",
    "cancel",
    "chain",
    "enqueue",
    "enqueue_many",
    "fail",
    "fetch",
    "group",
    "handler",
    "job",
    "periodic",
    "retry_discarded",
    "tenant",
    "wait",
]

_LAZY = {
    "handler": "django_ojs.registry",
    "periodic": "django_ojs.registry",
    "JobContext": "django_ojs.context",
    "JobError": "django_ojs.context",
    "JobSpec": "django_ojs.envelope",
    "JobState": "django_ojs.states",
    "RetryPolicy": "django_ojs.retry",
    "OJSError": "django_ojs.exceptions",
    "ValidationError": "django_ojs.exceptions",
    "InvalidTransition": "django_ojs.exceptions",
    "JobNotFound": "django_ojs.exceptions",
    "enqueue": "django_ojs.lifecycle",
    "enqueue_many": "django_ojs.lifecycle",
    "fetch": "django_ojs.lifecycle",
    "ack": "django_ojs.lifecycle",
    "fail": "django_ojs.lifecycle",
    "cancel": "django_ojs.lifecycle",
    "activate": "django_ojs.lifecycle",
    "beat": "django_ojs.lifecycle",
    "retry_discarded": "django_ojs.lifecycle",
    "wait": "django_ojs.lifecycle",
    "tenant": "django_ojs.tenancy",
    "chain": "django_ojs.workflows",
    "group": "django_ojs.workflows",
    "batch": "django_ojs.workflows",
    "job": "django_ojs.workflows",
    "Chain": "django_ojs.workflows",
    "Group": "django_ojs.workflows",
    "Batch": "django_ojs.workflows",
}

if TYPE_CHECKING:
    from django_ojs.context import JobContext, JobError
    from django_ojs.envelope import JobSpec
    from django_ojs.exceptions import InvalidTransition, JobNotFound, OJSError, ValidationError
    from django_ojs.lifecycle import (
        ack,
        activate,
        beat,
        cancel,
        enqueue,
        enqueue_many,
        fail,
        fetch,
        retry_discarded,
        wait,
    )
    from django_ojs.registry import handler, periodic
    from django_ojs.retry import RetryPolicy
    from django_ojs.states import JobState
    from django_ojs.tenancy import tenant
    from django_ojs.workflows import Batch, Chain, Group, batch, chain, group, job


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_ojs' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once: later lookups are plain module attributes
    return value
