"""Database drivers: choose the implementation for a connection's vendor.

``get_driver(using)`` is the only place that looks at ``connection.vendor``.
"""

from __future__ import annotations

from django.db import connections

from django_ojs.drivers.base import (
    Completion,
    Driver,
    EventMode,
    EventRow,
    Listener,
    Written,
    enqueue_event,
    job_data,
    job_rows,
)

__all__ = [
    "Completion",
    "Driver",
    "EventMode",
    "EventRow",
    "Listener",
    "UnsupportedDatabase",
    "Written",
    "enqueue_event",
    "get_driver",
    "job_data",
    "job_rows",
]

_drivers: dict[tuple[str, str], Driver] = {}


class UnsupportedDatabase(RuntimeError):
    """django-ojs supports PostgreSQL and SQLite."""


def get_driver(using: str) -> Driver:
    """The (stateless) driver for database alias ``using``."""
    vendor = connections[using].vendor
    key = (using, vendor)
    driver = _drivers.get(key)
    if driver is None:
        if vendor == "postgresql":
            from django_ojs.drivers.postgresql import PostgreSQLDriver

            driver = PostgreSQLDriver(using)
        elif vendor == "sqlite":
            from django_ojs.drivers.sqlite import SQLiteDriver

            driver = SQLiteDriver(using)
        else:
            raise UnsupportedDatabase(
                f"django-ojs supports PostgreSQL and SQLite, not {vendor!r} (alias {using!r})."
            )
        _drivers[key] = driver
    return driver
