"""The PostgreSQL driver, in parts: ``statements`` (the SQL), ``shapes`` (statement text
per case and its parameters), ``cursors`` (server-side binding, prepared statements,
binary rows, pipelines), ``driver`` (:class:`PostgreSQLDriver`) and ``listener``
(:class:`PostgreSQLListener`, ``LISTEN/NOTIFY``).
"""

from __future__ import annotations

from django_ojs.drivers.postgresql.driver import PostgreSQLDriver
from django_ojs.drivers.postgresql.listener import PostgreSQLListener

__all__ = ["PostgreSQLDriver", "PostgreSQLListener"]
