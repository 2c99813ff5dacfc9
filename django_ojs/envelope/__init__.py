"""The OJS job envelope: what clients send, validated (``parse``), and what we return,
rendered (``render``).

Pure: no database access. ``build`` validates the Python API's keyword options,
``from_wire`` the HTTP binding's request shapes; both return a :class:`JobSpec` for
``lifecycle.push``. ``to_wire`` renders a stored job as OJS JSON.
"""

from __future__ import annotations

from django_ojs.envelope.parse import (
    KNOWN_ATTRIBUTES,
    MAX_RESULT_TTL,
    PRIORITY_NAMES,
    PRIORITY_RANGE,
    SPECVERSION,
    SYSTEM_ATTRIBUTES,
    TIMEOUT_FIELDS,
    TYPE_MAX_LENGTH,
    TYPE_RE,
    JobSpec,
    build,
    build_plain,
    check_plain_size,
    from_wire,
    parse_timestamp,
    plain_fit,
    unsized_plain,
    validate_result_ttl,
    validate_type,
)
from django_ojs.envelope.render import format_timestamp, to_wire

__all__ = [
    "KNOWN_ATTRIBUTES",
    "MAX_RESULT_TTL",
    "PRIORITY_NAMES",
    "PRIORITY_RANGE",
    "SPECVERSION",
    "SYSTEM_ATTRIBUTES",
    "TIMEOUT_FIELDS",
    "TYPE_MAX_LENGTH",
    "TYPE_RE",
    "JobSpec",
    "build",
    "build_plain",
    "check_plain_size",
    "format_timestamp",
    "from_wire",
    "parse_timestamp",
    "plain_fit",
    "to_wire",
    "unsized_plain",
    "validate_result_ttl",
    "validate_type",
]
