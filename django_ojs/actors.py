"""Who asked for an operator or admin action: the principal recorded in the audit trail.

Pure: adapters build an :class:`Actor` from their request (an API key, a Django user, a
command) and pass it to the lifecycle operation, which writes the ``AuditEntry`` row in the
action's own transaction (OJS security §11).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where an action came from.
SOURCES = ("http", "admin", "command", "python")


@dataclass(frozen=True)
class Actor:
    """A principal (OJS security §3) acting through one adapter."""

    #: ``apikey:<name> (ojs_<prefix>_…)``, ``admin:<username>``, ``user:<username>``...
    #: never a credential (security §11.3: a truncated key id only).
    name: str
    #: ``http``, ``admin``, ``command`` or ``python``.
    source: str = "python"
    source_ip: str = ""
    #: The request id (``X-Request-Id``) for correlation (security §11.2).
    request_id: str = ""
