"""Webhook subscriptions (OJS webhooks §5-§6) and the dispatcher that makes deliveries.

The dispatcher reads ``ojs_event`` after a cursor (``ojs_webhook_cursor``) and pushes one
``ojs.webhook.deliver`` job per (event, matching subscription), in the transaction that
moves the cursor: each stored event is turned into deliveries exactly once, and the
deliveries are jobs (retries with backoff, dead letter, admin, metrics). Producers do
nothing more per event than store it, which they already do: the enqueue, fetch and ack
paths are the same with or without webhooks, and with no active subscription the
dispatcher does not even read the table (a cached answer, ``OJS_WEBHOOKS_CACHE_SECONDS``).

Events commit out of ``seq`` order on PostgreSQL (a transaction takes its ``seq`` at
insert and may commit after one that took a later one), so the cursor only moves over
contiguous sequence numbers. A gap is waited for (:data:`GAP_WAIT`); a gap older than
that is settled by the driver (:meth:`~django_ojs.drivers.base.Driver.settled_event_seq`,
a brief table lock on PostgreSQL): a sequence number below its answer that is still
missing belongs to a rolled-back transaction and is skipped.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from django_ojs import validation
from django_ojs.actors import Actor
from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.exceptions import EnvelopeTooLarge, ValidationError, WebhookNotFound
from django_ojs.lifecycle import audit
from django_ojs.lifecycle.push import push_many
from django_ojs.lifecycle.rows import build_spec
from django_ojs.lifecycle.settle import cancel
from django_ojs.lifecycle.store import db
from django_ojs.models import Event, Job, WebhookCursor, WebhookSubscription
from django_ojs.policy import default_retry_policy
from django_ojs.retry import RetryPolicy
from django_ojs.states import WAITING_STATES
from django_ojs.webhooks import DELIVER_TYPE, addresses, filters, signing

logger = logging.getLogger("django_ojs.webhooks")

#: Events read per dispatch transaction.
DISPATCH_BATCH = 1000
#: Seconds a gap in the event sequence is waited for before the driver settles it.
GAP_WAIT = 2.0
#: Longest wait for the PostgreSQL lock that settles a gap (pushes queue behind it).
SETTLE_LOCK_TIMEOUT = 0.05
#: Fields PATCH may change.
EDITABLE = ("url", "events", "filter", "metadata", "active")
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 255

#: Per database alias: (monotonic expiry, whether an active subscription exists).
_active: dict[str, tuple[float, bool]] = {}
#: Per database alias: (the first missing seq, monotonic time it was first seen missing).
_gaps: dict[str, tuple[int, float]] = {}


class _CursorMoved(Exception):
    """Another dispatcher moved the cursor first: this batch rolls back."""


# ---------------------------------------------------------------- subscriptions


def parse_id(value: Any) -> uuid.UUID:
    """A subscription id as the API shows it (``sub_<uuid>``) or a bare UUID."""
    if isinstance(value, uuid.UUID):
        return value
    text = str(value)
    try:
        return uuid.UUID(text.removeprefix("sub_"))
    except ValueError:
        raise WebhookNotFound(text) from None


def get(subscription_id: Any, *, using: str | None = None) -> WebhookSubscription:
    found = (
        WebhookSubscription.objects.using(db(using)).filter(pk=parse_id(subscription_id)).first()
    )
    if found is None:
        raise WebhookNotFound(subscription_id)
    return found


def check_url(url: Any) -> str:
    """A URL a subscription may have: its form, and its host's addresses now."""
    parts = addresses.parse_url(url, allow_http=settings.WEBHOOKS_ALLOW_HTTP)
    try:
        addresses.checked(
            parts.hostname or "",
            addresses.default_port(parts),
            allow_private=settings.WEBHOOKS_ALLOW_PRIVATE,
        )
    except (addresses.AddressRefused, addresses.Unresolvable) as exc:
        raise ValidationError(str(exc), field="url") from None
    return str(url)


def _metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError("metadata must be an object", field="metadata")
    checked: dict[str, Any] = validation.check_json(value, "metadata")
    return checked


def _active_flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError("active must be a boolean", field="active")
    return value


def _secret(value: Any) -> str:
    if value is None:
        return signing.new_secret()
    if (
        not isinstance(value, str)
        or not MIN_SECRET_LENGTH <= len(value) <= MAX_SECRET_LENGTH
        or not value.isprintable()
        or not value.isascii()
    ):
        raise ValidationError(
            f"secret must be printable ASCII of {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} "
            "characters (leave it out to have one made)",
            field="secret",
        )
    return value


def create(
    url: Any,
    events: Any,
    *,
    filter: Any = None,
    metadata: Any = None,
    active: Any = True,
    secret: Any = None,
    actor: Actor | None = None,
    using: str | None = None,
) -> WebhookSubscription:
    """Create a subscription (webhooks §6.1); the returned object carries its secret.

    It receives the events stored after it is made. Raises ``ValidationError`` for a bad
    field, including a URL whose host is not a public address (security).
    """
    using = db(using)
    values = {
        "events": filters.validate_events(events),
        "filter": filters.validate_filter(filter),
        "metadata": _metadata(metadata),
        "active": _active_flag(active),
        "secret": _secret(secret),
        "url": check_url(url),
    }
    with transaction.atomic(using=using):
        last = Event.objects.using(using).order_by("-seq").values_list("seq", flat=True).first()
        subscription = WebhookSubscription.objects.using(using).create(
            since_seq=last or 0, **values
        )
        audit.record(
            actor, "webhook.create", using, subscription=subscription.public_id, url=values["url"]
        )
    forget()
    return subscription


def update(
    subscription_id: Any,
    changes: dict[str, Any],
    *,
    actor: Actor | None = None,
    using: str | None = None,
) -> WebhookSubscription:
    """Change ``url``, ``events``, ``filter``, ``metadata`` or ``active`` (webhooks §6.4)."""
    using = db(using)
    if not isinstance(changes, dict):
        raise ValidationError("the body must be an object")
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        hint = " (rotate it with POST …/rotate-secret)" if unknown[0] == "secret" else ""
        raise ValidationError(
            f"{unknown[0]} cannot be changed{hint}; PATCH takes {', '.join(EDITABLE)}",
            field=unknown[0],
        )
    values: dict[str, Any] = {}
    if "events" in changes:
        values["events"] = filters.validate_events(changes["events"])
    if "filter" in changes:
        values["filter"] = filters.validate_filter(changes["filter"])
    if "metadata" in changes:
        values["metadata"] = _metadata(changes["metadata"])
    if "active" in changes:
        values["active"] = _active_flag(changes["active"])
    if "url" in changes:
        values["url"] = check_url(changes["url"])
    with transaction.atomic(using=using):
        subscription = _locked(subscription_id, using)
        for name, value in values.items():
            setattr(subscription, name, value)
        subscription.updated_at = timezone.now()
        subscription.save(using=using)
        audit.record(
            actor,
            "webhook.update",
            using,
            subscription=subscription.public_id,
            fields=sorted(values),
        )
    forget()
    return subscription


def delete(subscription_id: Any, *, actor: Actor | None = None, using: str | None = None) -> int:
    """Delete a subscription and cancel its pending deliveries (webhooks §6.5); return how
    many were cancelled. One running now sends its event; one a worker takes later
    completes with ``{"skipped": "subscription deleted"}``."""
    using = db(using)
    with transaction.atomic(using=using):
        subscription = _locked(subscription_id, using)
        public_id = subscription.public_id
        subscription.delete(using=using)
        pending = Job.objects.using(using).filter(
            type=DELIVER_TYPE,
            state__in=WAITING_STATES,
            meta__webhook__subscription_id=public_id,
        )
        cancelled = 0
        for job_id in pending.values_list("id", flat=True).iterator():
            cancel(job_id, reason=f"webhook subscription {public_id} deleted", using=using)
            cancelled += 1
        audit.record(actor, "webhook.delete", using, subscription=public_id, cancelled=cancelled)
    forget()
    return cancelled


def rotate_secret(
    subscription_id: Any, *, actor: Actor | None = None, using: str | None = None
) -> WebhookSubscription:
    """Give a subscription a new secret (webhooks §8.3); the old one keeps signing, next to
    the new one, for ``OJS_WEBHOOKS_SECRET_GRACE`` seconds."""
    using = db(using)
    now = timezone.now()
    with transaction.atomic(using=using):
        subscription = _locked(subscription_id, using)
        subscription.previous_secret = subscription.secret
        subscription.previous_secret_expires_at = now + timedelta(
            seconds=settings.WEBHOOKS_SECRET_GRACE
        )
        subscription.secret = signing.new_secret()
        subscription.updated_at = now
        subscription.save(using=using)
        audit.record(actor, "webhook.rotate_secret", using, subscription=subscription.public_id)
    return subscription


def record_delivery(
    subscription_id: Any, status: int | None, *, ok: bool, using: str | None = None
) -> None:
    """Note an attempt's outcome on its subscription (last status, failures in a row)."""
    WebhookSubscription.objects.using(db(using)).filter(pk=subscription_id).update(
        last_delivery_at=timezone.now(),
        last_delivery_status=status,
        failure_count=0 if ok else F("failure_count") + 1,
    )


def _locked(subscription_id: Any, using: str) -> WebhookSubscription:
    found = (
        WebhookSubscription.objects.using(using)
        .select_for_update()
        .filter(pk=parse_id(subscription_id))
        .first()
    )
    if found is None:
        raise WebhookNotFound(subscription_id)
    return found


# ---------------------------------------------------------------- dispatch


def forget() -> None:
    """Drop this process's cached "any active subscription?" answers."""
    _active.clear()


def any_active(using: str | None = None) -> bool:
    """Whether an active subscription exists, as seen at most
    ``OJS_WEBHOOKS_CACHE_SECONDS`` ago by this process."""
    using = db(using)
    now = time.monotonic()
    cached = _active.get(using)
    if cached is not None and cached[0] > now:
        return cached[1]
    found = WebhookSubscription.objects.using(using).filter(active=True).exists()
    _active[using] = (now + settings.WEBHOOKS_CACHE_SECONDS, found)
    return found


def dispatch(*, using: str | None = None, limit: int = DISPATCH_BATCH) -> int:
    """Turn the events stored since the last call into delivery jobs; return how many.

    Called by the reaper on each pass. Several reapers may call it at once: one moves
    the cursor at a time (a row lock, and a compare-and-set on the cursor).
    """
    using = db(using)
    if not any_active(using):
        return 0
    total = 0
    while True:
        try:
            pushed, more, gap = _dispatch_batch(using, limit)
            if gap is not None and _gap_waited(using, gap):
                # Outside the batch's transaction: the driver's lock must not outlive it.
                watermark = get_driver(using).settled_event_seq(timeout=SETTLE_LOCK_TIMEOUT)
                if watermark is not None and watermark >= gap:
                    done, more, _ = _dispatch_batch(using, limit, watermark=watermark)
                    pushed += done
        except _CursorMoved:
            return total
        total += pushed
        if not more:
            return total


def _dispatch_batch(
    using: str, limit: int, *, watermark: int | None = None
) -> tuple[int, bool, int | None]:
    """Push the deliveries of the next events; return how many, whether a full batch was
    read, and the first missing ``seq`` that stopped it (``None``: no gap).

    With ``watermark`` (a :meth:`settled_event_seq` answer), every ``seq`` up to it is
    settled: those still missing are skipped.
    """
    with transaction.atomic(using=using):
        cursor = (
            WebhookCursor.objects.using(using).select_for_update(skip_locked=True).filter(pk=1)
        ).first()
        if cursor is None:
            if WebhookCursor.objects.using(using).filter(pk=1).exists():
                return 0, False, None  # another dispatcher holds it
            cursor, _ = WebhookCursor.objects.using(using).get_or_create(pk=1)
        subscriptions = list(
            WebhookSubscription.objects.using(using)
            .filter(active=True)
            .only("id", "events", "filter", "since_seq")
        )
        if not subscriptions:
            return 0, False, None
        start = max(cursor.seq, min(s.since_seq for s in subscriptions))
        events = Event.objects.using(using).filter(seq__gt=start).order_by("seq")
        if watermark is not None:
            events = events.filter(seq__lte=watermark)
        rows = list(events[:limit])
        if watermark is not None:
            settled = rows[-1].seq if len(rows) == limit else max(watermark, start)
        else:
            settled = _settled(rows, start)
        gap = settled + 1 if rows and settled < rows[-1].seq else None
        ready = [row for row in rows if row.seq <= settled]
        options = _delivery_options()
        specs = [
            spec
            for row in ready
            if not filters.is_internal(row.type, _job_type(row))
            for subscription in subscriptions
            if row.seq > subscription.since_seq and _matches(subscription, row)
            if (spec := _delivery(subscription, row, options)) is not None
        ]
        if specs:
            push_many(specs, using=using, _middleware=False)
        if settled != cursor.seq:
            moved = (
                WebhookCursor.objects.using(using).filter(pk=1, seq=cursor.seq).update(seq=settled)
            )
            if not moved:
                raise _CursorMoved
    return len(specs), len(ready) == limit, gap


def _settled(rows: list[Event], start: int) -> int:
    """The end of the run of consecutive sequence numbers right after ``start``."""
    settled = start
    for row in rows:
        if row.seq != settled + 1:
            break
        settled = row.seq
    return settled


def _gap_waited(using: str, missing: int) -> bool:
    """Whether ``missing`` has been missing for :data:`GAP_WAIT` seconds (first seen now
    if it is a new gap)."""
    now = time.monotonic()
    seen = _gaps.get(using)
    if seen is None or seen[0] != missing:
        _gaps[using] = (missing, now)
        return GAP_WAIT <= 0
    return now - seen[1] >= GAP_WAIT


def _job_type(row: Event) -> str | None:
    data = row.data if isinstance(row.data, dict) else {}
    job_type = data.get("job_type")
    return job_type if isinstance(job_type, str) else None


def _matches(subscription: WebhookSubscription, row: Event) -> bool:
    return filters.matches(
        list(subscription.events or []),
        dict(subscription.filter or {}),
        event_type=row.type,
        queue=row.queue or None,
        job_type=_job_type(row),
    )


def _delivery_options() -> dict[str, Any]:
    """The job options every delivery has (the retry policy validated once)."""
    return {
        "queue": settings.WEBHOOKS_QUEUE,
        "retry": RetryPolicy.from_wire(settings.WEBHOOKS_RETRY, base=default_retry_policy()),
        # Two timeouts for the connection and the read, and a margin.
        "timeout": settings.WEBHOOKS_TIMEOUT * 3,
    }


def _delivery(subscription: WebhookSubscription, row: Event, options: dict[str, Any]) -> Any:
    """The delivery job of ``row`` for ``subscription``; ``None`` (logged) for an event
    too large for a job (``OJS_MAX_ENVELOPE_BYTES``), which must not hold up the rest."""
    event = row.to_wire()
    meta = {
        "webhook": {
            "subscription_id": subscription.public_id,
            "event_id": event["id"],
            "event_type": row.type,
        }
    }
    try:
        return build_spec(DELIVER_TYPE, [str(subscription.id), event], {**options, "meta": meta})
    except EnvelopeTooLarge as exc:
        logger.warning(
            "event %s not sent to webhook %s: %s", event["id"], subscription.public_id, exc
        )
        return None
