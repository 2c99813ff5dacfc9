"""The periods of the time-partitioned layout (PostgreSQL's optional ``ojs_partition``):
what a partition is, and where a day, week or month starts. Pure: no database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Partition:
    """One partition of a time-partitioned table: the rows created in ``[start, end)``.

    ``start`` and ``end`` are None for the default partition (rows outside every range).
    """

    table: str
    name: str
    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class Partitions:
    """A table's time partitions (PostgreSQL's optional layout), oldest first."""

    table: str
    interval: str  # "day", "week" or "month"
    ranges: list[Partition]
    default: Partition | None


#: The lengths a partitioned table's periods can have.
INTERVALS = ("day", "week", "month")


def period_start(moment: datetime, interval: str) -> datetime:
    """The first instant (UTC) of the ``interval`` ("day", "week", "month") holding ``moment``."""
    day = moment.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if interval == "week":
        return day - timedelta(days=day.weekday())
    if interval == "month":
        return day.replace(day=1)
    return day


def next_start(start: datetime, interval: str) -> datetime:
    """The first instant of the period after the one starting at ``start``."""
    if interval == "week":
        return start + timedelta(days=7)
    if interval == "month":
        return (start + timedelta(days=32)).replace(day=1)
    return start + timedelta(days=1)
