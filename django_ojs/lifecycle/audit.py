"""The audit trail writer (OJS security §11): one ``AuditEntry`` per operator/admin action.

Lifecycle operations that take an ``actor`` call :func:`record` inside their own
transaction, so the entry commits (or rolls back) with the action it describes. No actor
(internal callers: the reaper, the worker, tests) means no entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_ojs.actors import Actor
from django_ojs.models import AuditEntry


def record(
    actor: Actor | None,
    action: str,
    using: str,
    *,
    job_ids: Iterable[Any] = (),
    queue: str = "",
    worker_id: str = "",
    **detail: Any,
) -> None:
    """Write the entry for ``action`` by ``actor`` (nothing when ``actor`` is ``None``)."""
    if actor is None:
        return
    AuditEntry.objects.using(using).create(
        actor=actor.name[:255],
        source=actor.source,
        action=action,
        queue=queue,
        job_ids=[str(i) for i in job_ids],
        worker_id=worker_id,
        detail={k: v for k, v in detail.items() if v is not None},
        source_ip=actor.source_ip[:64],
        request_id=actor.request_id[:128],
    )


def by(by: str | None, actor: Actor | None) -> str | None:
    """The ``*_by`` of an event: the caller's explicit value, else the actor's name."""
    if by is not None:
        return by
    return actor.name if actor is not None else None
