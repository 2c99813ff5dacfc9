"""Cron schedules (OJS cron extension §3-§5): parsing, validation and the next fire time.

Pure functions. Calendar expressions are evaluated by **croniter** on *local wall-clock*
times of the entry's IANA zone, then placed on the UTC timeline with :mod:`zoneinfo`:

* 5 fields (minute precision) or 6 fields with seconds first (§3.2), names of months and
  days (§3.4), and the ``@yearly``/``@annually``/``@monthly``/``@weekly``/``@daily``/
  ``@midnight``/``@hourly`` aliases (§4);
* a local time that does not exist (the spring-forward gap) does not fire (§5.2);
* a local time that happens twice (fall back) fires once, at its first occurrence (§5.2);
* ``@every <duration>`` (§4.1: Go durations such as ``90s``, ``1h30m``, ``500ms``; ISO 8601
  ``PT90S`` is accepted too) fires every interval from its anchor, the registration or the
  previous slot, whatever the zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_ojs.exceptions import ValidationError
from django_ojs.validation import parse_duration

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
NAME = re.compile(r"[a-z0-9][a-z0-9\-.]*")
NAME_MAX = 255
_GO_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h))+")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_GO_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
# How far to look for the next match before calling the expression impossible (31 February).
_MAX_CANDIDATES = 2000


@dataclass(frozen=True)
class Schedule:
    """A validated expression: a calendar (``cron``, ``seconds``) or an interval."""

    expression: str
    timezone: str
    cron: str | None = None
    seconds: bool = False
    every_ms: int | None = None

    def next_after(self, after: datetime, *, anchor: datetime | None = None) -> datetime:
        """The first fire time strictly after ``after`` (aware UTC datetimes).

        For ``@every``, slots are ``anchor + k * interval`` (the anchor defaults to
        ``after``), so a schedule keeps its phase across restarts.
        """
        if self.every_ms is not None:
            step = timedelta(milliseconds=self.every_ms)
            base = anchor or after
            if base > after:
                return base
            periods = (after - base) // step + 1
            return base + periods * step
        zone = ZoneInfo(self.timezone)
        local = after.astimezone(zone).replace(tzinfo=None)
        assert self.cron is not None
        from croniter import CroniterError, croniter  # imported here: see parse()

        it = croniter(self.cron, local, second_at_beginning=self.seconds)
        for _ in range(_MAX_CANDIDATES):
            try:
                candidate: datetime = it.get_next(datetime)
            except (CroniterError, ValueError):  # e.g. "0 0 31 2 *": no such date
                break
            aware = candidate.replace(tzinfo=zone)  # fold=0: the first of a repeated time
            if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != candidate:
                continue  # §5.2: inside the spring-forward gap, this time does not exist
            fire = aware.astimezone(UTC)
            if fire > after:
                return fire
        raise ValidationError(
            f"cron expression '{self.expression}' never matches", field="expression"
        )


def zone(name: object) -> str:
    """A valid IANA zone name (§5.1), or :class:`ValidationError`."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise ValidationError("timezone must be an IANA zone name", field="timezone")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"timezone '{name}' is not an IANA zone name (e.g. 'UTC', 'Europe/Paris')",
            field="timezone",
        ) from None
    return name


def parse(expression: object, timezone: object = "UTC") -> Schedule:
    """Validate ``expression`` in ``timezone`` (§3.5: fail fast at registration)."""
    tz = zone(timezone)
    if not isinstance(expression, str) or not expression.strip():
        raise ValidationError("a cron expression is required", field="expression")
    text = " ".join(expression.split())
    if text.lower().startswith("@every"):
        return Schedule(text, tz, every_ms=_interval(text[len("@every") :].strip()))
    cron = ALIASES.get(text.lower(), text)
    if cron.startswith("@"):
        raise ValidationError(
            f"unknown special expression '{text}' (use @yearly, @monthly, @weekly, @daily, "
            "@hourly or @every <duration>)",
            field="expression",
        )
    fields = len(cron.split())
    if fields not in (5, 6):
        raise ValidationError(
            f"cron expression '{text}' has {fields} fields; 5 (minute hour day month weekday) "
            "or 6 (second first) are allowed",
            field="expression",
        )
    seconds = fields == 6
    # Imported here, not at the top: croniter (with dateutil) costs a worker or web
    # process that never parses a calendar expression about 6 ms of its start-up.
    from croniter import croniter

    if not croniter.is_valid(cron, second_at_beginning=seconds):
        raise ValidationError(f"'{text}' is not a valid cron expression", field="expression")
    schedule = Schedule(text, tz, cron=cron, seconds=seconds)
    schedule.next_after(datetime.now(UTC))  # refuses expressions that never match
    return schedule


def _interval(text: str) -> int:
    if _GO_DURATION.fullmatch(text):
        ms = sum(float(n) * _GO_UNIT_MS[unit] for n, unit in _GO_PART.findall(text))
    elif text.upper().startswith("P"):
        ms = parse_duration(text.upper(), field_name="expression")
    else:
        raise ValidationError(
            f"'@every {text}' needs a duration such as 30s, 5m, 1h30m or PT30S",
            field="expression",
        )
    if ms < 1:
        raise ValidationError("@every needs a duration of at least 1ms", field="expression")
    return int(ms)


def name(value: object) -> str:
    """A valid cron entry name (§2.2: ``[a-z0-9][a-z0-9-.]*``, at most 255 characters)."""
    if not isinstance(value, str) or len(value) > NAME_MAX or not NAME.fullmatch(value):
        raise ValidationError(
            "name must be lowercase letters, digits, '-' and '.', starting with a letter or "
            "digit (at most 255 characters)",
            field="name",
        )
    return value
