"""Maintenance mode (OJS admin API §12.1): the only writer of the ``Maintenance`` row.

While it is on, FETCH claims nothing (HTTP workers and ``ojs_worker`` alike), and the
reaper neither promotes scheduled or retryable jobs nor fires cron entries; enqueueing is
still accepted, the jobs wait (§12.1: "queuing for later", digest §8.17). The switch is a
database row, so every process sees it: a process reads it at most once per
``OJS_MAINTENANCE_CACHE_SECONDS`` (:func:`in_maintenance`, on the claim hot path), so
another process's fetch may still claim for that long after the switch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import ValidationError
from django_ojs.lifecycle import audit
from django_ojs.lifecycle.store import db
from django_ojs.models import Maintenance, Queue
from django_ojs.validation import check_string, duration_ms

#: Longest ``reason`` kept (the column's length).
MAX_REASON = 500


@dataclass(frozen=True)
class MaintenanceStatus:
    """Whether maintenance mode is on, and what the operator said about it."""

    enabled: bool
    reason: str = ""
    enabled_at: datetime | None = None
    estimated_end: datetime | None = None
    changed_by: str = ""
    changed_at: datetime | None = None


#: Per database alias: (monotonic time the value was read, whether maintenance was on).
_cache: dict[str, tuple[float, bool]] = {}
_clock = time.monotonic


def maintenance_status(*, using: str | None = None) -> MaintenanceStatus:
    """The switch as stored now (no cache): for the admin API, the dashboard, commands."""
    row = Maintenance.objects.using(db(using)).filter(pk=1).first()
    return _status(row)


def in_maintenance(*, using: str | None = None) -> bool:
    """Whether maintenance mode is on, read from the database at most once per
    ``OJS_MAINTENANCE_CACHE_SECONDS`` in this process (0: on every call).

    One indexed primary-key read per interval and process; a switch made in this process
    is seen at once (:func:`set_maintenance` forgets the cached value).
    """
    using = db(using)
    ttl = settings.MAINTENANCE_CACHE_SECONDS
    now = _clock()
    cached = _cache.get(using)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    enabled: bool = Maintenance.objects.using(using).filter(pk=1, enabled=True).exists()
    if ttl > 0:
        _cache[using] = (now, enabled)
    return enabled


def forget_maintenance() -> None:
    """Drop this process's cached maintenance switch (tests; after a switch)."""
    _cache.clear()


def set_maintenance(
    enabled: bool,
    *,
    reason: str = "",
    estimated_duration: Any = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> MaintenanceStatus:
    """Switch maintenance mode on or off and record who did it in the audit trail.

    ``estimated_duration`` (seconds, a ``timedelta`` or ISO-8601 such as ``PT30M``) sets
    ``estimated_end``; it is informative, nothing switches maintenance off by itself.
    Switching on while on keeps ``enabled_at`` and replaces the reason and estimate.
    Switching off wakes the workers of every queue, which fetch again at once.
    """
    using = db(using)
    if not isinstance(enabled, bool):
        raise ValidationError("enabled must be true or false", field="enabled")
    if not isinstance(reason, str):
        raise ValidationError("reason must be a string", field="reason")
    check_string(reason, "reason", max_length=MAX_REASON)
    ms = duration_ms(estimated_duration, "estimated_duration")
    if ms is not None and not enabled:
        raise ValidationError(
            "estimated_duration is only meaningful when enabling", field="estimated_duration"
        )
    now = timezone.now()
    with transaction.atomic(using=using):
        row, _ = Maintenance.objects.using(using).select_for_update().get_or_create(pk=1)
        changed = row.enabled != enabled
        if enabled:
            row.enabled_at = row.enabled_at if row.enabled and row.enabled_at else now
            row.reason = reason
            row.estimated_end = None if ms is None else now + timedelta(milliseconds=ms)
        else:
            row.enabled_at = row.estimated_end = None
            row.reason = ""
        row.enabled = enabled
        row.changed_by = (actor.name if actor is not None else "")[:255]
        row.changed_at = now
        row.save(using=using)
        audit.record(
            actor, "system.maintenance", using, enabled=enabled, changed=changed,
            reason=reason or None,
            estimated_end=None if row.estimated_end is None else row.estimated_end.isoformat(),
        )  # fmt: skip
        if changed and not enabled:
            # Idle workers wait for a push (PostgreSQL NOTIFY) or their poll interval:
            # tell them every queue may have work again.
            names = set(Queue.objects.using(using).values_list("name", flat=True))
            if names:
                get_driver(using).after_push(set(), names)
        transaction.on_commit(lambda: _cache.pop(using, None), using=using)
    _cache.pop(using, None)
    return _status(row)


def _status(row: Maintenance | None) -> MaintenanceStatus:
    if row is None or not row.enabled:
        return MaintenanceStatus(
            False,
            changed_by="" if row is None else row.changed_by,
            changed_at=None if row is None else row.changed_at,
        )
    return MaintenanceStatus(
        True, row.reason, row.enabled_at, row.estimated_end, row.changed_by, row.changed_at
    )
