"""Queue pause and resume (digest §8.17) and limits: the only writer of ``Queue`` rows.

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
from django_ojs.validation import validate_queue


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
    using = db(using)
    validate_queue(name)
    if limits is not None and not isinstance(limits, dict):
        raise ValidationError("limits must be an object", field="limits")
    stored: dict[str, Any] | None = None
    if limits:
        unknown = sorted(set(limits) - {"concurrency"})
        if unknown:
            raise ValidationError(
                f"queue limits support 'concurrency' only (got {', '.join(unknown)}); put "
                "window rates on the jobs' rate_limit",
                field=f"limits.{unknown[0]}",
            )
        value = limits.get("concurrency")
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(
                    "limits.concurrency must be an integer >= 0", field="limits.concurrency"
                )
            stored = {"concurrency": value}
    with transaction.atomic(using=using):
        queue, _ = Queue.objects.using(using).select_for_update().get_or_create(name=name)
        audit.record(actor, "queue.limits", using, queue=name, limits=stored)
        queue.limits = stored
        queue.save(using=using, update_fields=["limits"])
        events.emit_other("queue.limits_changed", name, using, queue=name, limits=stored)
    return queue
