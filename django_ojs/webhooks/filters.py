"""Which events a subscription receives (OJS webhooks §5.2). Pure.

``events`` are exact types (``job.completed``), prefix wildcards (``job.*``) or ``*``;
the optional ``filter`` narrows them by ``queues`` and ``job_types`` (exact, or
``prefix.*``): an event must match the type and every criterion given.
"""

from __future__ import annotations

import re
from typing import Any

from django_ojs.exceptions import ValidationError
from django_ojs.webhooks import DELIVER_TYPE

EVENT_PATTERN = re.compile(r"\*|[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(\.\*)?")
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+([.:][A-Za-z0-9_-]+)*(\.\*)?")
MAX_ITEMS = 100
MAX_LENGTH = 255
FILTER_KEYS = ("queues", "job_types")


def validate_events(value: Any, *, field: str = "events") -> list[str]:
    """A non-empty list of event type patterns, without repeats."""
    if not isinstance(value, list) or not value:
        raise ValidationError(f"{field} must be a non-empty array of event types", field=field)
    if len(value) > MAX_ITEMS:
        raise ValidationError(f"{field} has more than {MAX_ITEMS} items", field=field)
    for i, item in enumerate(value):
        if not isinstance(item, str) or len(item) > MAX_LENGTH or not EVENT_PATTERN.fullmatch(item):
            raise ValidationError(
                f"{field}[{i}] must be an event type (job.completed), a wildcard (job.*) or *",
                field=f"{field}[{i}]",
            )
    return list(dict.fromkeys(value))


def validate_filter(value: Any, *, field: str = "filter") -> dict[str, list[str]]:
    """``{"queues": [...], "job_types": [...]}``, each optional; ``None`` is no filter."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be an object", field=field)
    unknown = sorted(set(value) - set(FILTER_KEYS))
    if unknown:
        raise ValidationError(
            f"{field} takes only queues and job_types, not {unknown[0]}",
            field=f"{field}.{unknown[0]}",
        )
    out: dict[str, list[str]] = {}
    for key in FILTER_KEYS:
        items = value.get(key)
        if items is None:
            continue
        name = f"{field}.{key}"
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise ValidationError(f"{name} must be an array of names", field=name)
        for i, item in enumerate(items):
            if (
                not isinstance(item, str)
                or len(item) > MAX_LENGTH
                or not NAME_PATTERN.fullmatch(item)
            ):
                raise ValidationError(f"{name}[{i}] must be a name", field=f"{name}[{i}]")
        if items:
            out[key] = list(dict.fromkeys(items))
    return out


def _matches(pattern: str, value: str) -> bool:
    if pattern == "*" or pattern == value:
        return True
    return pattern.endswith(".*") and value.startswith(pattern[:-1])


def matches(
    events: list[str],
    filter: dict[str, Any],
    *,
    event_type: str,
    queue: str | None,
    job_type: str | None,
) -> bool:
    """Whether an event of ``event_type`` (of a job of ``job_type`` in ``queue``) matches."""
    if not any(_matches(p, event_type) for p in events):
        return False
    queues = filter.get("queues")
    if queues and queue not in queues:
        return False
    job_types = filter.get("job_types")
    return not (job_types and not (job_type and any(_matches(p, job_type) for p in job_types)))


def is_internal(event_type: str, job_type: str | None) -> bool:
    """Events never delivered: those of delivery jobs themselves (a ``job.*`` subscription
    would otherwise be sent the events of its own deliveries, without end)."""
    return job_type == DELIVER_TYPE or event_type.startswith("webhook.")
