"""Where read-only pages read: a replica named by ``OJS_READ_DATABASE``, and how stale it is.

The admin's lists and views, the dashboard, the ``/ojs/metrics`` gauges and the admin API's
lists may read from a replica of the job database, to keep that load off the primary.
Nothing that decides a job's fate reads here: claims, outcomes, the reaper, cron, unique
checks and the worker protocol use the job database (``OJS_DATABASE``) only, and so does
every write.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DatabaseError

from django_ojs.conf import settings
from django_ojs.drivers import get_driver


def read_database() -> str:
    """The alias read-only pages read from: ``OJS_READ_DATABASE``, else the job database."""
    return settings.READ_DATABASE or settings.DATABASE


@dataclass(frozen=True)
class ReplicaStatus:
    """What a read-only page read from, for the page to say so."""

    #: The alias read.
    alias: str
    #: Whether ``OJS_READ_DATABASE`` sends reads to an alias of their own.
    configured: bool
    #: Whether that database replays another server's changes (a standby).
    replica: bool
    #: Seconds behind the primary (0: all it received is replayed); None when unknown.
    lag: float | None
    #: Why the status could not be read (the replica is unreachable), if it could not.
    error: str = ""

    def describe(self) -> str:
        """One line for a page: where its figures come from and how stale they may be."""
        if not self.configured:
            return ""
        where = f"Read from database {self.alias!r}"
        if self.error:
            return f"{where}: its replication status could not be read ({self.error})."
        if not self.replica:
            return f"{where}, which is not a replica: up to date."
        if self.lag is None:
            return f"{where}, a replica: how far behind the primary it is, is not known yet."
        return f"{where}, a replica {self.lag:.1f} s behind the primary."


def replica_status() -> ReplicaStatus:
    """How stale the read database is (``OJS_READ_DATABASE``; not configured: up to date)."""
    alias = read_database()
    if not settings.READ_DATABASE or alias == settings.DATABASE:
        return ReplicaStatus(alias, configured=False, replica=False, lag=0.0)
    try:
        replica, lag = get_driver(alias).replica_lag()
    except DatabaseError as exc:
        detail = str(exc).strip().splitlines()
        return ReplicaStatus(alias, True, False, None, error=detail[0] if detail else "error")
    return ReplicaStatus(alias, configured=True, replica=replica, lag=lag if replica else 0.0)
