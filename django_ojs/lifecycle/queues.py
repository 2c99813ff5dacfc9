"""Queue pause and resume (digest §8.17), limits and retention: the only writer of
``Queue`` rows.

Pausing stops FETCH from a queue; enqueueing is still accepted. Each change records a
``queue.paused``/``queue.resumed`` event in the same transaction. Not job transitions.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs.actors import Actor
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.store import db
from django_ojs.models import Queue
from django_ojs.validation import validate_queue, validate_retention


def pause_queue(
    name: str, *, by: str | None = None, actor: Actor | None = None, using: str | None = None
) -> Queue:
    """Stop workers from fetching ``name`` (idempotent: no event if already paused)."""
    return _set_paused(name, True, by, actor, using)


def resume_queue(
    name: str, *, by: str | None = None, actor: Actor | None = None, using: str | None = None
) -> Queue:
    """Let workers fetch ``name`` again (idempotent: no event if not paused)."""
    return _set_paused(name, False, by, actor, using)


def _set_paused(
    name: str, paused: bool, by: str | None, actor: Actor | None, using: str | None
) -> Queue:
    using = db(using)
    validate_queue(name)
    now = timezone.now()
    by = audit.by(by, actor)
    with transaction.atomic(using=using):
        queue, _ = Queue.objects.using(using).select_for_update().get_or_create(name=name)
        audit.record(
            actor, "queue.pause" if paused else "queue.resume", using, queue=name,
            changed=queue.paused != paused,
        )  # fmt: skip
        if queue.paused != paused:
            queue.paused = paused
            queue.paused_at = now if paused else None
            queue.save(using=using, update_fields=["paused", "paused_at"])
            kind = "queue.paused" if paused else "queue.resumed"
            events.emit_other(
                kind, name, using, queue=name, **{("paused_by" if paused else "resumed_by"): by}
            )
    return queue


#: Leaves a part of a queue's configuration as it is (see :func:`configure_queue`).
KEEP: Any = object()


def set_queue_limits(
    name: str,
    limits: dict[str, Any] | None,
    *,
    actor: Actor | None = None,
    using: str | None = None,
) -> Queue:
    """Set (or, with ``None``/``{}``, remove) the queue-level limit of ``name``.

    ``{"concurrency": N}``: at most N jobs of the queue active at once, whatever their own
    rate limits (rate-limiting §7.2), enforced at claim time for every process together.
    Raises :class:`ValidationError` naming the bad field.
    """
    return configure_queue(name, limits=limits, actor=actor, using=using)


def set_queue_retention(
    name: str,
    retention: dict[str, Any] | None,
    *,
    actor: Actor | None = None,
    using: str | None = None,
) -> Queue:
    """Set (or, with ``None``/``{}``, remove) how long ``name`` keeps its finished jobs.

    ``{"completed": "P14D", "discarded": "P90D", "cancelled": "P7D"}`` (queue config
    §6.3): ISO 8601 durations, or seconds; a kind left out (or ``None``) follows
    ``OJS_RETENTION``. The reaper prunes the queue's jobs by it. Dead-lettered jobs,
    workflows and events keep their global retention. Raises :class:`ValidationError`
    naming the bad field (``retention.completed``...).
    """
    return configure_queue(name, retention=retention, actor=actor, using=using)


def configure_queue(
    name: str,
    *,
    limits: dict[str, Any] | None = KEEP,
    retention: dict[str, Any] | None = KEEP,
    actor: Actor | None = None,
    using: str | None = None,
) -> Queue:
    """Set the limits and/or the retention of ``name`` in one transaction (all or none).

    A part not given (:data:`KEEP`) stays as it is; see :func:`set_queue_limits` and
    :func:`set_queue_retention` for each. Each part given is recorded in the audit trail
    (``queue.limits``, ``queue.retention``) and emits its event
    (``queue.limits_changed``, ``queue.retention_changed``).
    """
    using = db(using)
    validate_queue(name)
    changes: dict[str, Any] = {}
    if limits is not KEEP:
        changes["limits"] = _limits(limits)
    if retention is not KEEP:
        changes["retention"] = validate_retention(retention)
    with transaction.atomic(using=using):
        queue, _ = Queue.objects.using(using).select_for_update().get_or_create(name=name)
        for column, stored in changes.items():
            audit.record(actor, f"queue.{column}", using, queue=name, **{column: stored})
            setattr(queue, column, stored)
        if changes:
            queue.save(using=using, update_fields=list(changes))
        for column, stored in changes.items():
            events.emit_other(
                f"queue.{column}_changed", name, using, queue=name, **{column: stored}
            )
    return queue


def _limits(limits: Any) -> dict[str, Any] | None:
    """The limits to store (``{"concurrency": N}`` or ``None``), or ValidationError."""
    if limits is not None and not isinstance(limits, dict):
        raise ValidationError("limits must be an object", field="limits")
    if not limits:
        return None
    unknown = sorted(set(limits) - {"concurrency"})
    if unknown:
        raise ValidationError(
            f"queue limits support 'concurrency' only (got {', '.join(unknown)}); put "
            "window rates on the jobs' rate_limit",
            field=f"limits.{unknown[0]}",
        )
    value = limits.get("concurrency")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            "limits.concurrency must be an integer >= 0", field="limits.concurrency"
        )
    return {"concurrency": value}


def queue_retention(*, using: str | None = None) -> dict[str, dict[str, float]]:
    """The retention overrides of every queue that has one: ``{queue: {kind: seconds}}``."""
    rows = Queue.objects.using(db(using)).filter(retention__isnull=False)
    return {name: dict(value) for name, value in rows.values_list("name", "retention") if value}
