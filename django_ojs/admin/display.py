"""How jobs, errors and times look in the admin: state badges, pretty JSON, "ago" labels.

Pure presentation: turns values into escaped HTML. No queries.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

#: The badge colour of each OJS state (CSS classes in ``static/ojs/admin.css``).
STATE_CSS = {
    "scheduled": "ojs-state-scheduled",
    "available": "ojs-state-available",
    "pending": "ojs-state-pending",
    "active": "ojs-state-active",
    "completed": "ojs-state-completed",
    "retryable": "ojs-state-retryable",
    "cancelled": "ojs-state-cancelled",
    "discarded": "ojs-state-discarded",
    # Workflow states (workflows §8.1).
    "running": "ojs-state-active",
    "failed": "ojs-state-discarded",
}


def state_badge(state: str) -> SafeString:
    return format_html(
        '<span class="ojs-state {}">{}</span>', STATE_CSS.get(state, "ojs-state-unknown"), state
    )


def pretty_json(value: object) -> SafeString:
    """Indented JSON in a ``<pre>`` block (``null`` when empty)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="ojs-json">{}</pre>', text)


def error_type(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("type") or error.get("code") or "")
    return ""


def error_message(error: object, limit: int = 120) -> str:
    if not isinstance(error, dict):
        return ""
    message = str(error.get("message") or "")
    return message if len(message) <= limit else message[: limit - 1] + "…"


def seconds_ago(when: datetime | None, now: datetime | None = None) -> float | None:
    if when is None:
        return None
    return ((now or timezone.now()) - when).total_seconds()


def humanize_seconds(seconds: float) -> str:
    """``42s``, ``5m 3s``, ``2h 10m``, ``3d 4h``."""
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def compact_time(when: datetime | None, now: datetime | None = None) -> SafeString | str:
    """``05:32:49`` today, ``Nov 21 05:32`` this year, ``2025-11-21`` before; full time on hover."""
    if when is None:
        return "-"
    local = timezone.localtime(when)
    today = timezone.localtime(now or timezone.now())
    if local.date() == today.date():
        label = local.strftime("%H:%M:%S")
    elif local.year == today.year:
        label = local.strftime("%b %d %H:%M")
    else:
        label = local.strftime("%Y-%m-%d")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        label,
    )
