"""A queue's configuration on the wire: what GET renders and what PUT accepts back.

Read by ``GET /ojs/v1/queues/{name}/config`` and ``GET /ojs/v1/admin/queues/{name}``
(``configuration``), written by both ``PUT .../config``. A PUT of what a GET returned
changes nothing (the official admin UI sends the whole object back):

* ``retention`` is in ISO 8601 durations (queue config §6.3, admin API §6.2 and §6.6),
  the queue's own value where it has one, else ``OJS_RETENTION``'s (``null``: kept
  forever); ``retention_source`` says which (``"queue"`` or ``"default"``) and is
  ignored on PUT. Numbers of seconds are accepted too (the admin API's earlier answers).
* PUT sets the whole configuration (HTTP PUT): a part it leaves out (``concurrency``, a
  ``retention`` kind) goes back to the default. A retention equal to the default, for a
  kind the queue does not set, stays the default (it is what GET filled in), so the
  queue keeps following ``OJS_RETENTION``. See docs/explanation/spec-readings.md.
"""

from __future__ import annotations

from typing import Any

from django_ojs import retry, validation
from django_ojs.conf import settings
from django_ojs.exceptions import ValidationError
from django_ojs.queues import QueueInfo

#: The fields of a queue's configuration a PUT may send.
FIELDS = ("concurrency", "limits", "rate_limit", "retention", "retention_source")


def retention(info: QueueInfo) -> dict[str, Any]:
    """``{"retention": {kind: "P7D" | None}, "retention_source": {kind: "queue" | "default"}}``."""
    own = info.retention or {}
    defaults = settings.RETENTION
    values: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    for kind in validation.RETENTION_KINDS:
        seconds = own.get(kind, defaults.get(kind))
        values[kind] = None if seconds is None else retry.format_duration_days(seconds * 1000)
        sources[kind] = "queue" if kind in own else "default"
    return {"retention": values, "retention_source": sources}


def render(info: QueueInfo) -> dict[str, Any]:
    """The ``config`` of ``GET /queues/{name}/config``: ``limits`` as before, retention."""
    return {"limits": info.limits, **retention(info)}


def configuration(info: QueueInfo) -> dict[str, Any]:
    """The admin API's ``configuration`` (§6.2): ``concurrency`` where set, retention."""
    return {**(info.limits or {}), **retention(info)}


def parse(body: dict[str, Any], info: QueueInfo) -> tuple[dict[str, Any] | None, Any]:
    """``(limits, retention)`` to store for a PUT of ``body`` on the queue ``info``.

    ``body`` is the configuration (``{"concurrency": 5, "retention": {...}}``), or a GET's
    whole answer (``{"queue": ..., "config": {...}}``, or the admin API's queue with its
    ``configuration``: only that part is read), or the older forms
    ``{"limits": {"concurrency": N}}`` and ``{"rate_limit": {"concurrency": N}}``.
    Raises :class:`ValidationError` naming the field.
    """
    for wrapper in ("config", "configuration"):
        if isinstance(body.get(wrapper), dict):
            # The rest of that answer (the queue, its counts...) is read-only.
            body = body[wrapper]
            break
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise ValidationError(
            f"a queue's configuration has no field {unknown[0]!r} (it takes concurrency "
            "and retention)",
            field=unknown[0],
        )
    return _limits(body), _retention(body.get("retention"), info)


def _limits(body: dict[str, Any]) -> Any:
    """The limits a PUT asks for: ``limits``, a ``rate_limit`` of ``concurrency`` only
    (older forms), or the spec's top-level ``concurrency``."""
    limits: Any = None
    rate = body.get("rate_limit")
    if rate is not None:
        if not isinstance(rate, dict) or set(rate) - {"concurrency"}:
            raise ValidationError(
                "a queue takes a concurrency limit only (rate-limiting §7.2); put window "
                "rates (limit per period) on the jobs' rate_limit",
                field="rate_limit",
            )
        limits = rate
    if "limits" in body:
        limits = body["limits"]
    if not isinstance(limits, dict | None):
        return limits  # the lifecycle refuses it, naming the field
    if body.get("concurrency") is not None:
        value = body["concurrency"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError("concurrency must be an integer >= 0", field="concurrency")
        if isinstance(limits, dict) and limits.get("concurrency") not in (
            None,
            body["concurrency"],
        ):
            raise ValidationError(
                "concurrency and limits.concurrency disagree", field="concurrency"
            )
        limits = {**(limits or {}), "concurrency": body["concurrency"]}
    return limits


def _retention(value: Any, info: QueueInfo) -> dict[str, float] | None:
    """The override to store: each kind given, except a default one GET filled in."""
    asked = validation.validate_retention(value) or {}
    own = info.retention or {}
    defaults = settings.RETENTION
    keep = {
        kind: seconds
        for kind, seconds in asked.items()
        if kind in own or defaults.get(kind) is None or seconds != defaults[kind]
    }
    return keep or None
