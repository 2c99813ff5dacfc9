"""The rule for each input a caller sends: one function per input, one message per refusal.

The HTTP serializers and the lifecycle functions both call these, so the Python API and the
HTTP binding accept and refuse the same values with the same
:class:`~django_ojs.exceptions.ValidationError` (message and ``field``). Pure: no database,
no Django; patterns are matched with ``fullmatch`` (a trailing newline never passes).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal, NamedTuple, overload

from django_ojs.conf import DEFAULT_QUEUE, settings
from django_ojs.exceptions import (
    EnvelopeTooLarge,
    JobTypeNotAllowed,
    NotStorable,
    RetryPolicyError,
    ValidationError,
)
from django_ojs.tenancy import validate_tenant

QUEUE_PATTERN = re.compile(r"[a-z0-9][a-z0-9\-.]*")
QUEUE_MAX_LENGTH = 128
#: Most jobs one FETCH may claim (HTTP binding §10.1 ``count``).
MAX_FETCH_COUNT = 1000
#: Longest worker id (the ``ojs_worker.id`` column).
WORKER_ID_MAX_LENGTH = 255
#: States a worker may report in a BEAT (worker protocol §4).
WORKER_STATES = ("running", "quiet", "terminate")
#: Longest host name a worker reports (the ``ojs_worker.hostname`` column).
HOSTNAME_MAX_LENGTH = 255
#: Longest ``schema`` URI (the ``ojs_job.schema`` column).
SCHEMA_MAX_LENGTH = 512

# Column ranges: Django's IntegerField/PositiveIntegerField are 32-bit, the
# BigIntegerField family 64-bit, on every supported database.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: Longest duration accepted anywhere (timeouts, intervals, relative times): 100 years.
#: Larger values would not fit the ``*_ms`` columns or overflow date arithmetic.
MAX_DURATION_MS = 100 * 365 * 86_400_000
#: Digits of the largest integer a JSON value may hold (Python's int↔str conversion limit).
MAX_JSON_INT_DIGITS = 4300
_JSON_INT_LIMIT = 10**MAX_JSON_INT_DIGITS

# Characters no database column can store: NUL (PostgreSQL text and jsonb refuse it) and
# UTF-16 surrogates, which are not Unicode scalar values and cannot be encoded as UTF-8.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


# --------------------------------------------------------------------------- scalars


def check_string(value: str, field: str, *, max_length: int) -> str:
    """A string that fits its column (``max_length`` characters) and the job store."""
    if len(value) > max_length:
        raise ValidationError(f"{field} must be at most {max_length} characters", field=field)
    return check_text(value, field)


def check_text(value: str, field: str, *, label: str | None = None) -> str:
    """Refuse a string the job store cannot hold: one with NUL or a lone surrogate.

    ``\\u0000`` and unpaired UTF-16 surrogates (``\\ud800``-``\\udfff``) are valid in a
    JSON string but not in PostgreSQL text or jsonb, nor in UTF-8
    (docs/explanation/spec-readings.md, "Input the job store cannot hold").
    """
    found = _UNSTORABLE.search(value)
    if found is not None:
        what = (
            "the NUL character (\\u0000)"
            if found.group() == "\x00"
            else ("an unpaired UTF-16 surrogate (\\ud800-\\udfff)")
        )
        raise NotStorable(f"{label or field} must not contain {what}", field=field)
    return value


def storable_text(value: Any) -> Any:
    """``value`` with each NUL and unpaired surrogate in its strings replaced by U+FFFD.

    For reports that are diagnostics, not data (a failed attempt's error): the store keeps
    them readable rather than losing them. Walks lists and dicts (keys too), iteratively;
    other values are returned as they are.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if not isinstance(value, list | tuple | dict):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, str):
            parent[key] = _UNSTORABLE.sub("\ufffd", item)
        elif isinstance(item, dict):
            copy: Any = {}
            parent[key] = copy
            for k, v in item.items():
                k = _UNSTORABLE.sub("\ufffd", k) if isinstance(k, str) else k
                copy[k] = None
                stack.append((v, copy, k))
        elif isinstance(item, list | tuple):
            copy = [None] * len(item)
            parent[key] = copy
            stack.extend((v, copy, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def check_int(value: Any, field: str, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """An integer from ``minimum`` to ``maximum`` (its column's range); booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(
            f"{field} must be an integer from {minimum} to {maximum}", field=field
        )
    return value


# --------------------------------------------------------------------------- JSON values


def _where(location: tuple[Any, ...]) -> str:
    # location is (parent location, key) pairs down from (path,): rendered only on errors
    keys: list[Any] = []
    while len(location) == 2:
        location, key = location
        keys.append(key)
    root = str(location[0])
    return root + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(keys))


def _scalar(item: Any, location: tuple[Any, ...]) -> Any:
    """Check one non-container value (``location`` names it in the error)."""
    if item is None or isinstance(item, bool):
        return item
    if isinstance(item, str):
        if _UNSTORABLE.search(item):
            check_text(item, _where(location))
        return item
    if isinstance(item, int):
        if item.bit_length() > 14_000 and abs(item) >= _JSON_INT_LIMIT:
            where = _where(location)
            raise ValidationError(
                f"{where} has more than {MAX_JSON_INT_DIGITS} digits", field=where
            )
        return item
    if isinstance(item, float):
        if not math.isfinite(item):
            where = _where(location)
            raise ValidationError(f"{where} must not be NaN or Infinity", field=where)
        return item
    where = _where(location)
    raise ValidationError(
        f"{where} must contain only JSON-native values, not {type(item).__name__}", field=where
    )


def check_json(value: Any, path: str, *, max_depth: int | None = None) -> Any:
    """Return ``value`` as JSON-native data, or raise naming ``path`` (OJS core §5.5.1).

    Tuples become lists; anything that is not str/int/float/bool/None/list/dict is refused
    (no pickling, no ``default=str``), as are NaN/Infinity, non-string keys, strings the
    store cannot hold (:func:`check_text`), integers of more than
    :data:`MAX_JSON_INT_DIGITS` digits, and nesting deeper than ``max_depth`` arrays or
    objects (``OJS_MAX_JSON_DEPTH``). Iterative: no input can exhaust the Python stack.
    """
    if not isinstance(value, list | tuple | dict):
        return _scalar(value, (path,))
    if not value:  # most jobs' meta and extra: nothing to check
        return {} if isinstance(value, dict) else []
    if not isinstance(value, dict) and (max_depth is None or max_depth > 0) and _flat(value):
        return list(value)  # most jobs' args: no walk, 0.3 against 1.2 µs for [1]
    limit = max_depth  # the setting is read only for nested input (a flat list is common)
    unstorable = _UNSTORABLE.search
    root: list[Any] = [None]
    # containers still to copy: (value, its depth, where the copy goes, its key there, location)
    stack: list[tuple[Any, int, Any, Any, tuple[Any, ...]]] = [(value, 1, root, 0, (path,))]
    while stack:
        item, depth, parent, key, location = stack.pop()
        if depth > 1 and limit is None:
            limit = settings.MAX_JSON_DEPTH
        if limit is not None and depth > limit:
            raise ValidationError(f"{path} is nested more than {limit} levels deep", field=path)
        copy: Any
        if isinstance(item, dict):
            copy = {}
            pairs: Any = item.items()
        else:
            copy = [None] * len(item)
            pairs = enumerate(item)
        for k, v in pairs:
            if copy.__class__ is dict:
                if k.__class__ is not str and not isinstance(k, str):
                    where = _where(location)
                    raise ValidationError(f"{where} keys must be strings", field=where)
                if unstorable(k):
                    where = _where(location)
                    check_text(k, where, label=f"{where} keys")
            cls = v.__class__
            if cls is str:
                if unstorable(v):
                    check_text(v, _where((location, k)))
                copy[k] = v
            elif cls is int:
                copy[k] = v if v.bit_length() <= 14_000 else _scalar(v, (location, k))
            elif cls is list or cls is dict or cls is tuple or isinstance(v, list | tuple | dict):
                copy[k] = None
                stack.append((v, depth + 1, copy, k, (location, k)))
            else:
                copy[k] = _scalar(v, (location, k))
        parent[key] = copy
    return root[0]


def _flat(items: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every one of ``items`` passes as it is: a string the store can hold, an
    int of at most 14,000 bits, a bool or None (anything else takes the full walk)."""
    unstorable = _UNSTORABLE.search
    for v in items:
        cls = v.__class__
        if cls is str:
            if unstorable(v):
                return False
        elif cls is int:
            if v.bit_length() > 14_000:
                return False
        elif v is not None and cls is not bool:
            return False
    return True


#: An escape in a JSON string (``\\"``, ``\\\\``, ``\\n``, the ``\\u`` of ``\\uXXXX``).
_JSON_ESCAPE = re.compile(rb"\\.", re.DOTALL)
#: Every byte but the brackets and the quote is deleted; ``{}`` become ``[]``.
_STRUCTURE_ONLY = bytes(set(range(256)) - set(b'[]{}"'))
_ONE_BRACKET_KIND = bytes.maketrans(b"{}", b"[]")


def json_text_depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the valid JSON document ``raw`` nests arrays/objects more than ``limit``
    levels deep.

    Reads the bytes, not the decoded value: escapes are removed, then every byte but the
    quotes and brackets (one C pass), then what lies between quotes (the strings), then
    the innermost pairs, one level per pass. A batch of 100 jobs: tens of µs, against
    about 1 ms for :func:`json_depth_exceeds` walking the decoded body in Python. In
    UTF-8 a byte of a multi-byte character is never an ASCII bracket or quote.
    """
    if b"\\" in raw:
        raw = _JSON_ESCAPE.sub(b"", raw)
    brackets = b"".join(raw.translate(_ONE_BRACKET_KIND, _STRUCTURE_ONLY).split(b'"')[::2])
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")  # the innermost pairs: one level
    return bool(brackets)


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays/objects more than ``limit`` levels deep (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in item if isinstance(v, list | dict))
    return False


# --------------------------------------------------------------------------- meta

#: OJS security §8.3: meta keys, values without newlines, at most 64 KiB in all.
META_KEY_PATTERN = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
MAX_META_BYTES = 64 * 1024


def _has_newline(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" in value or "\r" in value
    if isinstance(value, list):
        return any(_has_newline(v) for v in value)
    if isinstance(value, dict):
        return any(_has_newline(k) or _has_newline(v) for k, v in value.items())
    return False


#: Compact JSON, UTF-8 kept: one encoder, not one per ``json.dumps`` call with options.
_COMPACT_UTF8 = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def validate_meta(value: Any, *, field: str = "meta") -> dict[str, Any]:
    """Job metadata (OJS security §8.3): an object of JSON values; ``None`` is ``{}``.

    Keys match ``[a-zA-Z0-9_.-]{1,128}``; no string inside a value contains ``\\r`` or
    ``\\n`` (header injection); the compact JSON encoding is at most 64 KiB
    (:class:`EnvelopeTooLarge` above it, HTTP 413).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be an object", field=field)
    meta: dict[str, Any] = check_json(value, field)
    if "tenant_id" in meta:
        validate_tenant(meta["tenant_id"], field=f"{field}.tenant_id")
    for key, item in meta.items():
        if not META_KEY_PATTERN.fullmatch(key):
            raise ValidationError(
                f"{field} keys must match [a-zA-Z0-9_.-] and be 1 to 128 characters; "
                f"{key[:130]!r} does not",
                field=field,
                details={"key": key[:130]},
            )
        if _has_newline(item):
            raise ValidationError(
                f"{field}.{key} must not contain newline characters (\\r or \\n)",
                field=f"{field}.{key}",
            )
    size = len(_COMPACT_UTF8.encode(meta).encode("utf-8"))
    if size > MAX_META_BYTES:
        raise EnvelopeTooLarge(
            f"{field} is {size} bytes; the limit is {MAX_META_BYTES} bytes (64 KiB)",
            details={"field": field, "size": size, "limit": MAX_META_BYTES},
        )
    return meta


# --------------------------------------------------------------------------- job types


def name_allowed(name: str, patterns: Sequence[str]) -> bool:
    """Whether ``name`` is one of ``patterns`` or starts with a ``prefix*`` one's prefix.

    ``billing.*`` allows ``billing.invoice`` but not ``billing``; ``*`` allows everything.
    Used for job types (``OJS_ALLOWED_JOB_TYPES``) and API key queue allowlists.
    """
    for pattern in patterns:
        if pattern == name or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return True
    return False


type_allowed = name_allowed


def split_patterns(patterns: Sequence[str]) -> tuple[list[str], list[str]]:
    """``patterns`` as :func:`name_allowed` reads them: the exact names, and the prefixes of
    the ``prefix*`` ones (``""`` for ``*``), for a database query to match the same names."""
    names = [p for p in patterns if not p.endswith("*")]
    prefixes = [p[:-1] for p in patterns if p.endswith("*")]
    return names, prefixes


def validate_allowed_type(job_type: str, patterns: Sequence[str] | None) -> str:
    """``job_type`` if the allowlist (``OJS_ALLOWED_JOB_TYPES``; ``None``: off) has it.

    Raises :class:`JobTypeNotAllowed` (HTTP 422, OJS security §8.1) otherwise.
    """
    if patterns is not None and not type_allowed(job_type, patterns):
        raise JobTypeNotAllowed(job_type, tuple(patterns))
    return job_type


# --------------------------------------------------------------------------- queues


def _queue_name(value: Any, label: str, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{label} must be a non-empty string", field=field)
    if len(value) > QUEUE_MAX_LENGTH or not QUEUE_PATTERN.fullmatch(value):
        raise ValidationError(
            f"{label} must match [a-z0-9][a-z0-9-.]* and be at most {QUEUE_MAX_LENGTH} characters",
            field=field,
        )
    return value


def validate_queue(value: Any, *, field: str = "queue") -> str:
    """A queue name (OJS core §5.2); ``None`` means the default queue."""
    if value is None:
        return DEFAULT_QUEUE
    return _queue_name(value, field, field)


def validate_queue_patterns(value: Any, *, field: str = "queues") -> list[str]:
    """An API key's queue allowlist: queue names or ``prefix*`` patterns (may be empty)."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValidationError(f"{field} must be an array of queue names", field=field)
    out = []
    for i, pattern in enumerate(value):
        if isinstance(pattern, str) and pattern.endswith("*"):
            if pattern != "*" and not QUEUE_PATTERN.fullmatch(pattern[:-1]):
                raise ValidationError(
                    f"{field}[{i}] must be a queue name or a queue name prefix followed by '*'",
                    field=field,
                )
            out.append(pattern)
        else:
            out.append(_queue_name(pattern, f"{field}[{i}]", field))
    return out


def validate_queues(value: Any, *, field: str = "queues", allow_empty: bool = False) -> list[str]:
    """A list of queue names, in the caller's order (a bare string is refused)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValidationError(f"{field} must be an array of queue names", field=field)
    if not value and not allow_empty:
        raise ValidationError(f"{field} must name at least one queue", field=field)
    return [_queue_name(v, f"{field}[{i}]", field) for i, v in enumerate(value)]


def validate_pool_name(value: Any, *, field: str = "pool") -> str:
    """A worker pool's name (fair scheduling §6.1): the form of a queue name."""
    return _queue_name(value, field, field)


def validate_fetch_count(value: Any) -> int:
    """How many jobs one FETCH may claim: an integer from 1 to :data:`MAX_FETCH_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_FETCH_COUNT:
        raise ValidationError(
            f"count must be an integer from 1 to {MAX_FETCH_COUNT}", field="count"
        )
    return value


# --------------------------------------------------------------------------- workers


@overload
def validate_worker_id(value: Any, *, required: Literal[True]) -> str: ...
@overload
def validate_worker_id(value: Any, *, required: bool = False) -> str | None: ...
def validate_worker_id(value: Any, *, required: bool = False) -> str | None:
    """A worker id: a non-empty string of at most 255 characters (``None`` if optional)."""
    if value is None:
        if required:
            raise ValidationError("worker_id is required", field="worker_id")
        return None
    if not isinstance(value, str) or not value:
        raise ValidationError("worker_id must be a non-empty string", field="worker_id")
    return check_string(value, "worker_id", max_length=WORKER_ID_MAX_LENGTH)


def validate_hostname(value: Any) -> str | None:
    """The host a worker reports: a string of at most 255 characters (or ``None``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError("hostname must be a string", field="hostname")
    return check_string(value, "hostname", max_length=HOSTNAME_MAX_LENGTH)


def validate_worker_state(value: Any) -> str | None:
    """The state a worker reports in a BEAT: running, quiet or terminate (or ``None``)."""
    if value is not None and value not in WORKER_STATES:
        raise ValidationError("state must be running, quiet or terminate", field="state")
    return None if value is None else str(value)


def validate_non_negative(value: Any, field: str) -> int | None:
    """A count a worker reports (``pid``, ``concurrency``): an integer from 0 to 2^31-1, or None."""
    return None if value is None else check_int(value, field)


def validate_strings(value: Any, field: str) -> list[str] | None:
    """A list of non-empty strings (worker ``labels``, ids), or None."""
    if value is None:
        return None
    if (
        isinstance(value, str)
        or not isinstance(value, list | tuple)
        or not all(isinstance(v, str) and v for v in value)
    ):
        raise ValidationError(f"{field} must be an array of non-empty strings", field=field)
    return [check_text(v, field) for v in value]


# --------------------------------------------------------------------------- progress


class Progress(NamedTuple):
    value: float  # 0.0-1.0
    message: str | None
    data: dict[str, Any] | None


def validate_progress(
    value: Any,
    message: Any = None,
    data: Any = None,
    *,
    field: str = "progress",
    scale: float = 1.0,
) -> Progress:
    """A progress report: ``value`` from 0 to ``scale`` (clamped), a message, structured data.

    Out-of-range numbers are clamped, not refused (progress extension §5). ``scale`` is
    100 for a ``percentage``; the result is always a fraction from 0.0 to 1.0.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{field} must be a number from 0 to {scale:g}", field=field)
    if message is not None:
        if not isinstance(message, str):
            raise ValidationError("message must be a string", field="message")
        check_text(message, "message")
    if data is not None:
        if not isinstance(data, dict):
            raise ValidationError("data must be an object", field="data")
        data = check_json(data, "data")
    return Progress(min(max(value / scale, 0.0), 1.0), message, data)


# --------------------------------------------------------------------------- durations

# Retry §14: the only accepted duration grammar (RET-19 MUST reject anything else).
# Matched with fullmatch: a trailing newline must not pass.
_DURATION = re.compile(
    r"P(?!\Z)(?:(?P<y>\d+)Y)?(?:(?P<mo>\d+)M)?(?:(?P<d>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<mi>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


def parse_duration(value: str, *, field_name: str = "duration") -> int:
    """Parse an ISO-8601 duration (``PT1S``, ``PT0.5S``, ``P1DT2H``) to milliseconds.

    Years and months count as 365 and 30 days (retry §4 discourages them). At most
    :data:`MAX_DURATION_MS` (100 years).
    """
    if not isinstance(value, str):
        raise RetryPolicyError(
            f"{field_name} must be an ISO-8601 duration string", field=field_name
        )
    m = _DURATION.fullmatch(value)
    if not m or value.endswith("T"):
        raise RetryPolicyError(
            f"{field_name} {value[:64]!r} is not an ISO-8601 duration (e.g. 'PT1S', 'PT5M')",
            field=field_name,
        )
    parts = {k: float(v) if v else 0.0 for k, v in m.groupdict().items()}
    seconds = (
        parts["y"] * 365 * 86400
        + parts["mo"] * 30 * 86400
        + parts["d"] * 86400
        + parts["h"] * 3600
        + parts["mi"] * 60
        + parts["s"]
    )
    if not seconds * 1000 <= MAX_DURATION_MS:  # also catches inf from a 400-digit number
        raise RetryPolicyError(_too_long(field_name), field=field_name)
    return round(seconds * 1000)


def _too_long(field: str) -> str:
    return f"{field} must be at most {MAX_DURATION_MS} milliseconds (100 years)"


def duration_ms(value: Any, field: str, *, unit: str = "s", allow_zero: bool = False) -> int | None:
    """A duration a caller asks for, in whole milliseconds; ``None`` passes through.

    ``unit="s"``: a number of seconds, a ``timedelta`` or an ISO-8601 string (``PT30S``);
    ``unit="ms"``: a number of milliseconds. Positive (or non-negative with
    ``allow_zero``) and finite.
    """
    if value is None:
        return None
    kind = "non-negative" if allow_zero else "positive"
    unit_name = "seconds" if unit == "s" else "milliseconds"
    message = f"{field} must be a {kind} number of {unit_name}"
    if unit == "s" and isinstance(value, timedelta):
        value = value.total_seconds()
    elif unit == "s" and isinstance(value, str):
        try:
            value = parse_duration(value, field_name=field) / 1000
        except ValidationError as exc:
            raise ValidationError(exc.message, field=field) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(message, field=field)
    ms = value * 1000 if unit == "s" else value
    if not math.isfinite(ms) or ms < 0 or (ms == 0 and not allow_zero):
        raise ValidationError(message, field=field)
    if ms > MAX_DURATION_MS:
        raise ValidationError(_too_long(field), field=field)
    return round(ms)


#: The kinds of finished jobs a queue may keep for its own time (queue config §6.3).
RETENTION_KINDS = ("completed", "discarded", "cancelled")


def validate_retention(value: Any, *, field: str = "retention") -> dict[str, float] | None:
    """A queue's own retention (queue config §6.3), seconds per kind (None: none). Each kind:
    ISO 8601 (``"P14D"``), seconds or a timedelta, zero allowed; None follows the setting."""
    if value is None:
        return None
    if not isinstance(value, dict):
        message = f'{field} must be an object of ISO 8601 durations ({{"completed": "P14D"}})'
        raise ValidationError(f"{message} or null", field=field)
    for kind in sorted(str(k) for k in value if k not in RETENTION_KINDS)[:1]:
        kinds = f"a queue sets {', '.join(RETENTION_KINDS)} (OJS_RETENTION the others)"
        raise ValidationError(f"{field} has no kind {kind!r}: {kinds}", field=f"{field}.{kind}")
    out: dict[str, float] = {}
    for kind in (k for k in RETENTION_KINDS if value.get(k) is not None):
        ms = duration_ms(value[kind], f"{field}.{kind}", allow_zero=True) or 0
        out[kind] = ms // 1000 if ms % 1000 == 0 else ms / 1000
    return out or None


def first_duration_ms(
    source: Sequence[dict[str, Any]], name: str, *, allow_zero: bool = False
) -> int | None:
    """A wire duration: ``<name>_ms`` (milliseconds) wins over ``<name>`` (seconds/ISO-8601).

    ``source`` lists the objects to look in, first match wins (``options`` before the
    top level of an enqueue request, HTTP binding §9.1).
    """
    for unit, key in (("ms", f"{name}_ms"), ("s", name)):
        for obj in source:
            if obj.get(key) is not None:
                return duration_ms(obj[key], key, unit=unit, allow_zero=allow_zero)
    return None
