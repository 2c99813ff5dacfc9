"""Cron jobs (OJS cron extension): registration and firing, exactly once per slot.

Every worker's maintenance loop and every ``ojs_reaper`` call :func:`fire_due`. There is
no leader to elect or lose (cron §7 asks for one; see ``docs/explanation/spec-readings.md``):
an evaluator takes a slot by moving the entry's ``next_run_at`` forward with a
compare-and-set (``UPDATE … WHERE name = %s AND next_run_at = <slot>``) and enqueues the
slot's job **in the same transaction**. Exactly one evaluator's update matches; the
others see the new ``next_run_at`` and leave. A crash between the two rolls both back, so
the next evaluator takes the slot again: never a gap, never a duplicate.

Catch-up after downtime: an entry whose slot passed while nothing ran fires once, late,
and its next slot is the first one in the future (at most one late run).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from django_ojs import envelope, schedule
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.exceptions import CronNotFound, OJSError, ValidationError
from django_ojs.lifecycle import audit, events
from django_ojs.lifecycle.push import push
from django_ojs.lifecycle.settle import cancel
from django_ojs.lifecycle.store import db
from django_ojs.models import CronJob, Job
from django_ojs.policy import default_retry_policy
from django_ojs.states import JobState

logger = logging.getLogger("django_ojs.cron")

#: Due entries looked at per evaluation.
BATCH = 100
OVERLAP_POLICIES = tuple(CronJob.Overlap.values)


def _template(type: Any, args: Any, options: Any) -> dict[str, Any]:
    """Validate the job template as an enqueue request would be (fail fast, §3.5)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValidationError("options must be an object", field="options")
    body = {"type": type, "args": [] if args is None else args, "options": options}
    envelope.from_wire(
        body, max_bytes=settings.MAX_ENVELOPE_BYTES, retry_base=default_retry_policy()
    )
    return body


def register(
    name: Any,
    expression: Any,
    type: Any,
    args: Any = None,
    *,
    options: Mapping[str, Any] | None = None,
    timezone_name: str = "UTC",
    overlap_policy: str | None = None,
    enabled: bool | None = None,
    description: str | None = None,
    origin: str = CronJob.Origin.API,
    actor: Actor | None = None,
    using: str | None = None,
) -> tuple[CronJob, bool]:
    """Create or update the cron job ``name`` (cron §8.1: registration is an upsert).

    Returns ``(entry, created)``. ``enabled=None`` keeps an existing entry's flag (an
    operator's pause survives a re-declaration), and is ``True`` for a new one.
    """
    using = db(using)
    schedule.name(name)
    rule = schedule.parse(expression, timezone_name)
    body = _template(type, args, dict(options) if options is not None else None)
    policy = overlap_policy or CronJob.Overlap.SKIP
    if policy not in OVERLAP_POLICIES:
        raise ValidationError(
            f"overlap_policy must be one of {', '.join(OVERLAP_POLICIES)}", field="overlap_policy"
        )
    if policy == CronJob.Overlap.ENQUEUE and (body["options"] or {}).get("rate_limit"):
        raise ValidationError(
            "overlap_policy 'enqueue' runs one job at a time with the rate-limit key "
            f"cron:{name}; remove options.rate_limit",
            field="overlap_policy",
        )
    if enabled is not None and not isinstance(enabled, bool):
        raise ValidationError("enabled must be a boolean", field="enabled")
    if description is not None and not isinstance(description, str):
        raise ValidationError("description must be a string", field="description")
    now = timezone.now()
    with transaction.atomic(using=using):
        entry = CronJob.objects.using(using).select_for_update().filter(pk=name).first()
        created = entry is None
        if entry is None:
            entry = CronJob(name=name, created_at=now, enabled=True if enabled is None else enabled)
        elif enabled is not None:
            entry.enabled = enabled
        reschedule = created or (entry.expression, entry.timezone) != (
            rule.expression,
            rule.timezone,
        )
        entry.expression, entry.timezone = rule.expression, rule.timezone
        entry.type, entry.args, entry.options = body["type"], body["args"], body["options"]
        entry.overlap_policy, entry.origin, entry.updated_at = policy, origin, now
        if description is not None:
            entry.description = description
        if not entry.enabled:
            entry.next_run_at = None
        elif reschedule or entry.next_run_at is None:
            entry.next_run_at = rule.next_after(now, anchor=now + _step(rule))
        entry.save(using=using)
        audit.record(actor, "cron.register", using, name=name, created=created)
    return entry, created


def _step(rule: schedule.Schedule) -> timedelta:
    """An ``@every`` schedule's first slot is one interval after registration (§4.1)."""
    return timedelta(milliseconds=rule.every_ms or 0)


def get(name: str, *, using: str | None = None) -> CronJob:
    entry = CronJob.objects.using(db(using)).filter(pk=name).first()
    if entry is None:
        raise CronNotFound(name)
    return entry


def delete(name: str, *, actor: Actor | None = None, using: str | None = None) -> CronJob:
    """Remove a cron job (cron §8.4); jobs it already enqueued are left alone."""
    using = db(using)
    with transaction.atomic(using=using):
        entry = get(name, using=using)
        entry.delete(using=using)
        audit.record(actor, "cron.delete", using, name=name)
    entry.name = name
    return entry


def set_enabled(
    name: str, enabled: bool, *, actor: Actor | None = None, using: str | None = None
) -> CronJob:
    """Pause or resume a cron job (cron §8.5). Resuming schedules from now (no catch-up)."""
    using = db(using)
    if not isinstance(enabled, bool):
        raise ValidationError("enabled must be a boolean", field="enabled")
    now = timezone.now()
    with transaction.atomic(using=using):
        entry = CronJob.objects.using(using).select_for_update().filter(pk=name).first()
        if entry is None:
            raise CronNotFound(name)
        if entry.enabled != enabled:
            entry.enabled = enabled
            rule = schedule.parse(entry.expression, entry.timezone)
            entry.next_run_at = rule.next_after(now, anchor=now + _step(rule)) if enabled else None
            entry.updated_at = now
            entry.save(using=using, update_fields=["enabled", "next_run_at", "updated_at"])
        audit.record(actor, "cron.enable" if enabled else "cron.disable", using, name=name)
    return entry


def run_now(name: str, *, actor: Actor | None = None, using: str | None = None) -> Job:
    """Enqueue the cron job's job now, outside its schedule (which does not move)."""
    using = db(using)
    now = timezone.now()
    with transaction.atomic(using=using):
        entry = get(name, using=using)
        job = push(_spec(entry, now, now, manual=True), using=using)
        CronJob.objects.using(using).filter(pk=name).update(
            last_run_at=now, last_job_id=job.id, run_count=F("run_count") + 1
        )
        events.emit_other(
            "cron.triggered", name, using, queue=job.queue, cron_name=name, job_id=str(job.id),
            scheduled_at=_ts(now), manual=True,
        )  # fmt: skip
        audit.record(actor, "cron.run_now", using, name=name, job_ids=[job.id])
    return job


def _ts(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _spec(entry: CronJob, slot: datetime, now: datetime, *, manual: bool = False) -> Any:
    options = dict(entry.options or {})
    meta = dict(options.pop("meta", None) or options.pop("metadata", None) or {})
    # cron §6.3: the job names its cron job (the overlap correlation key) and its slot.
    meta.update(cron_name=entry.name, cron_scheduled_at=_ts(slot), cron_triggered_at=_ts(now))
    if manual:
        meta["cron_manual"] = True
    if entry.overlap_policy == CronJob.Overlap.ENQUEUE:
        # cron §6.1 "enqueue": every run is queued, never two at once. A concurrency limit
        # of 1 on the entry's own key holds them back while one runs (rate-limiting §5.1).
        options["rate_limit"] = {"key": f"cron:{entry.name}", "concurrency": 1}
    body = {"type": entry.type, "args": entry.args, "meta": meta, "options": options}
    return envelope.from_wire(
        body, max_bytes=settings.MAX_ENVELOPE_BYTES, retry_base=default_retry_policy()
    )


def fire_due(*, now: datetime | None = None, using: str | None = None) -> tuple[int, int]:
    """Fire every enabled entry whose slot is due; returns ``(fired, skipped)``.

    Safe to call from any number of processes at once: see the module docstring.
    """
    using = db(using)
    now = now or timezone.now()
    due = list(
        CronJob.objects.using(using)
        .filter(enabled=True, next_run_at__lte=now)
        .order_by("next_run_at")
        .values_list("name", flat=True)[:BATCH]
    )
    fired = skipped = 0
    for name in due:
        outcome = _fire(name, now, using)
        fired += outcome == "fired"
        skipped += outcome == "skipped"
    return fired, skipped


def _fire(name: str, now: datetime, using: str) -> str:
    entry = CronJob.objects.using(using).filter(pk=name, enabled=True).first()
    if entry is None or entry.next_run_at is None or entry.next_run_at > now:
        return "gone"
    slot = entry.next_run_at
    try:
        rule = schedule.parse(entry.expression, entry.timezone)
        following = rule.next_after(max(slot, now), anchor=slot)
    except ValidationError:
        logger.exception("cron job %s has an invalid schedule; disabling it", name)
        CronJob.objects.using(using).filter(pk=name).update(enabled=False, next_run_at=None)
        return "gone"
    with transaction.atomic(using=using):
        # The compare-and-set that makes this evaluator the only one firing this slot.
        won = (
            CronJob.objects.using(using)
            .filter(pk=name, enabled=True, next_run_at=slot)
            .update(next_run_at=following, last_run_at=now)
        )
        if not won:
            return "lost"
        previous = None
        if entry.last_job_id is not None:
            previous = Job.objects.using(using).filter(pk=entry.last_job_id).only("state").first()
        running = previous is not None and previous.state == JobState.ACTIVE
        if running and entry.overlap_policy == CronJob.Overlap.SKIP:
            return _skip(entry, slot, using, reason="overlap", previous=previous)
        if running and entry.overlap_policy == CronJob.Overlap.CANCEL_PREVIOUS:
            assert previous is not None
            cancel(previous.id, reason=f"cron {name}: a newer run started", using=using)
        try:
            with transaction.atomic(using=using):
                job = push(_spec(entry, slot, now), using=using)
        except OJSError as exc:  # e.g. OJS_ALLOWED_JOB_TYPES changed since registration
            logger.error("cron job %s could not enqueue its job: %s", name, exc)
            return _skip(entry, slot, using, reason="error", error=str(exc))
        CronJob.objects.using(using).filter(pk=name).update(
            last_job_id=job.id, run_count=F("run_count") + 1
        )
        if entry.overlap_policy == CronJob.Overlap.ENQUEUE:
            _warn_backlog(name, using)
        events.emit_other(
            "cron.triggered", name, using, queue=job.queue, cron_name=name,
            job_id=str(job.id), job_type=job.type, scheduled_at=_ts(slot),
            late_ms=int((now - slot).total_seconds() * 1000),
            missed=_missed(rule, slot, following),
        )  # fmt: skip
    return "fired"


def _warn_backlog(name: str, using: str) -> None:
    """Cron §6.1: log a warning when more than 2 runs of an ``enqueue`` entry wait."""
    waiting = Job.objects.using(using).filter(rate_key=f"cron:{name}", state=JobState.AVAILABLE)
    count = waiting.count()
    if count > 2:
        logger.warning(
            "cron job %s: %d runs are queued behind a running one (overlap_policy 'enqueue')",
            name,
            count,
        )


def _missed(rule: schedule.Schedule, slot: datetime, following: datetime) -> int:
    """Slots between ``slot`` and ``following`` that catch-up left out (at most 1000 counted)."""
    count, at = 0, rule.next_after(slot, anchor=slot)
    while at < following and count < 1000:
        count += 1
        at = rule.next_after(at, anchor=slot)
    return count


def _skip(
    entry: CronJob, slot: datetime, using: str, *, reason: str, previous: Job | None = None,
    error: str | None = None,
) -> str:  # fmt: skip
    CronJob.objects.using(using).filter(pk=entry.name).update(skip_count=F("skip_count") + 1)
    events.emit_other(
        "cron.skipped", entry.name, using, cron_name=entry.name, scheduled_at=_ts(slot),
        reason=reason, active_job_id=str(previous.id) if previous is not None else None,
        error=error,
    )  # fmt: skip
    return "skipped"


def declared() -> dict[str, dict[str, Any]]:
    """The cron jobs declared in code: ``OJS_CRON`` and ``@django_ojs.periodic``."""
    from django_ojs.registry import periodic_entries

    entries = {
        name: dict(spec, origin=CronJob.Origin.CODE) for name, spec in periodic_entries().items()
    }
    for name, spec in (settings.CRON or {}).items():
        entries[name] = dict(spec, origin=CronJob.Origin.SETTINGS)
    return entries


def sync(
    entries: Mapping[str, Mapping[str, Any]] | None = None, *, using: str | None = None
) -> dict[str, int]:
    """Store the declared cron jobs (startup of workers and reapers, ``ojs_cron sync``).

    Declared entries are created or updated, keeping an operator's pause (``enabled``);
    entries that came from code or settings and are no longer declared are removed. Entries
    registered over HTTP or in the admin are never touched.
    """
    using = db(using)
    entries = declared() if entries is None else entries
    created = updated = 0
    for name, spec in entries.items():
        spec = dict(spec)
        new = _declare(name, spec.get("cron") or spec.get("expression"), spec, using)
        created += new
        updated += not new
    stale = (
        CronJob.objects.using(using)
        .exclude(origin=CronJob.Origin.API)
        .exclude(name__in=list(entries))
    )
    removed, _ = stale.delete()
    return {"created": created, "updated": updated, "removed": removed}


_ENTRY_KEYS = ("cron", "expression", "type", "args", "timezone", "overlap_policy",
               "description", "enabled", "origin", "options")  # fmt: skip


def _declare(name: str, expression: Any, spec: dict[str, Any], using: str) -> bool:
    """Register one declared entry; its other keys (``queue``, ``meta``...) are job options."""
    options = dict(spec.get("options") or {})
    options.update({k: v for k, v in spec.items() if k not in _ENTRY_KEYS})
    for attempt in (1, 2):
        try:
            _, new = register(
                name, expression, spec.get("type"), spec.get("args"), options=options,
                timezone_name=spec.get("timezone") or "UTC",
                overlap_policy=spec.get("overlap_policy"), enabled=None,
                description=spec.get("description"),
                origin=spec.get("origin", CronJob.Origin.SETTINGS), using=using,
            )  # fmt: skip
            return new
        except IntegrityError:  # another process created it at the same moment
            if attempt == 2:
                raise
    return False
