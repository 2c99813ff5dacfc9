"""Idempotency keys of bulk requests (bulk operations §10): the only writer of
``IdempotencyKey`` rows.

The first request with a key claims it (a committed row, unique per operation and key),
runs, and stores its answer; a repeat with the same body gets that answer again, without
running; a repeat with another body, or while the first is still running, is a conflict
(409). Answers are kept ``OJS_BULK_IDEMPOTENCY_SECONDS`` (24 h), then pruned by the reaper.
A claim left without an answer for :data:`ABANDONED_AFTER` (its process died) is taken over
by the next request with the key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from django_ojs.conf import settings
from django_ojs.exceptions import IdempotencyConflict, ValidationError
from django_ojs.lifecycle.store import db
from django_ojs.models import IdempotencyKey
from django_ojs.validation import check_text, storable_text

#: Longest key accepted (§10.2).
MAX_KEY = 256
#: A claim still without an answer after this long belongs to a request whose process
#: died (a bulk request is at most ``OJS_BULK_MAX_ITEMS`` items: seconds, not minutes):
#: the next request with the key takes it over instead of a 409 until the key expires.
ABANDONED_AFTER = timedelta(minutes=10)


def fingerprint(body: Any) -> str:
    """SHA-256 of ``body`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def idempotent(
    operation: str,
    key: str | None,
    body: Any,
    run: Callable[[], tuple[int, dict[str, Any]]],
    *,
    using: str | None = None,
) -> tuple[int, dict[str, Any], bool]:
    """``run()`` once per ``(operation, key)``: returns ``(status, answer, replayed)``.

    Without a key, ``run()`` is called and nothing is stored. A repeat with the same key
    and ``body`` within the retention period returns the stored answer with
    ``replayed=True``; another body, or the first request still running, raises
    :class:`IdempotencyConflict`. When ``run()`` raises, the key is released (a retry runs
    again), and the error propagates.
    """
    if key is None:
        status, answer = run()
        return status, answer, False
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ValidationError(
            f"idempotency_key must be a non-empty string of at most {MAX_KEY} characters",
            field="idempotency_key",
        )
    check_text(key, "idempotency_key")
    using = db(using)
    digest = fingerprint(body)
    now = timezone.now()
    rows = IdempotencyKey.objects.using(using)
    expired_before = now - timedelta(seconds=settings.BULK_IDEMPOTENCY_SECONDS)
    try:
        # A committed claim of its own: a concurrent request with the same key sees it
        # (PostgreSQL makes it wait on the unique index until this commits).
        with transaction.atomic(using=using):
            # An expired key is a new request (§10.2), even before the reaper deletes it;
            # so is one whose first request was abandoned without an answer.
            rows.filter(operation=operation, key=key).filter(
                Q(created_at__lt=expired_before)
                | Q(status__isnull=True, created_at__lt=now - ABANDONED_AFTER)
            ).delete()
            claim = rows.create(operation=operation, key=key, fingerprint=digest, created_at=now)
    except IntegrityError:
        found = rows.filter(operation=operation, key=key).first()
        if found is None:  # deleted in between (expired and pruned): run as new
            return idempotent(operation, key, body, run, using=using)
        if found.fingerprint != digest:
            raise IdempotencyConflict(
                f"Idempotency key '{key}' was used with a different request body.",
                details={"idempotency_key": key, "reason": "different_body"},
            ) from None
        if found.status is None:
            raise IdempotencyConflict(
                f"A request with idempotency key '{key}' is still being processed.",
                details={"idempotency_key": key, "reason": "in_progress"},
            ) from None
        return found.status, dict(found.response or {}), True
    try:
        status, answer = run()
    except BaseException:
        rows.filter(pk=claim.pk).delete()
        raise
    # An error message may echo a client's NUL or lone surrogate, which jsonb refuses; the
    # stored copy has U+FFFD in their place (the first answer is sent as it is).
    rows.filter(pk=claim.pk).update(status=status, response=storable_text(answer))
    return status, answer, False


def prune_idempotency_keys(*, now: datetime | None = None, using: str | None = None) -> int:
    """Delete the stored answers older than ``OJS_BULK_IDEMPOTENCY_SECONDS``."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.BULK_IDEMPOTENCY_SECONDS)
    deleted, _ = IdempotencyKey.objects.using(db(using)).filter(created_at__lt=cutoff).delete()
    return deleted
