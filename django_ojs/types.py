"""Type aliases shared across django-ojs (for annotations; nothing here runs).

Job ids are UUIDs (UUIDv7 by default); the HTTP binding and the Python API also accept
their string form, which the lifecycle parses. Worker ids are the strings workers choose.
"""

from __future__ import annotations

import uuid
from typing import TypeAlias

#: A job's id as stored and returned: ``Job.id``.
JobId: TypeAlias = uuid.UUID
#: A job id as accepted at the public API boundaries (``lifecycle``, HTTP, admin).
JobIdLike: TypeAlias = uuid.UUID | str
#: A worker's id (``Worker.id``), chosen by the worker.
WorkerId: TypeAlias = str
