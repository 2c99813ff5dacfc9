"""Queue pause and resume (digest §8.17): the only writer of ``Queue.paused``.

Pausing stops FETCH from a queue; enqueueing is still accepted. Each change records a
``queue.paused``/``queue.resumed`` event in the same transaction. Not job transitions.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from django_ojs.actors import Actor
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
