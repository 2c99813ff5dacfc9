"""Unique jobs (OJS unique-jobs extension): the policy and its key. Pure functions.

A policy says which jobs count as the same work (its *dimensions*: the job type always,
plus any of ``queue``, ``args`` and selected ``meta`` keys), in which states an existing job
blocks a new one, for how long (``period``, from the existing job's ``created_at``) and what
to do on a conflict (``on_conflict``). :func:`policy` validates and normalises what a client
sends; :func:`key` computes the fingerprint of §4: SHA-256 over canonical JSON (keys sorted at
every level, compact, Unicode NFC), in lower-case hex.

Enforcement (one job per key in the guarded states, also under concurrent pushes) is the
lifecycle's, under a database lock on the key: :mod:`django_ojs.lifecycle.push`.

Readings (``docs/explanation/spec-readings.md``): ``key`` is accepted for ``keys`` and
``use_existing`` for ``ignore`` (digest 8.24); a ``keys`` entry that is not a dimension
name is an args key; because OJS ``args`` is an array, ``args_keys`` select keys of its
object elements.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Any

from django_ojs.exceptions import ValidationError
from django_ojs.states import JobState
from django_ojs.validation import parse_duration

DIMENSIONS = ("type", "queue", "args", "meta")
ON_CONFLICT = ("reject", "replace", "replace_except_schedule", "ignore")
ALIASES = {"use_existing": "ignore"}
#: §6.1: the states an existing job blocks a new one in, unless the policy says otherwise.
DEFAULT_STATES = ("available", "active", "scheduled", "retryable", "pending")
FIELDS = frozenset({"keys", "key", "args_keys", "meta_keys", "period", "states", "on_conflict"})
_STATES = frozenset(s.value for s in JobState)


@dataclass(frozen=True)
class UniquePolicy:
    """A validated policy (§2). ``period_ms`` is ``None`` for no expiry."""

    keys: tuple[str, ...]
    args_keys: tuple[str, ...] | None
    meta_keys: tuple[str, ...] | None
    period_ms: int | None
    period: str | None
    states: tuple[str, ...]
    on_conflict: str

    def to_wire(self) -> dict[str, Any]:
        """The normalised policy as stored on the job and returned to clients."""
        wire: dict[str, Any] = {
            "keys": list(self.keys),
            "states": list(self.states),
            "on_conflict": self.on_conflict,
        }
        if self.args_keys is not None:
            wire["args_keys"] = list(self.args_keys)
        if self.meta_keys is not None:
            wire["meta_keys"] = list(self.meta_keys)
        if self.period is not None:
            wire["period"] = self.period
        return wire


def _fail(message: str, field: str = "unique") -> ValidationError:
    return ValidationError(message, field=field)


def _strings(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(f"unique.{name} must be an array of non-empty strings", f"unique.{name}")
    return list(value)


def policy(value: dict[str, Any], args: list[Any], meta: dict[str, Any]) -> UniquePolicy:
    """Validate ``value`` (a client's ``unique`` object) for a job with ``args``/``meta``.

    Raises :class:`ValidationError` (``invalid_request``, §2.2) naming the bad field.
    """
    unknown = sorted(set(value) - FIELDS)
    if unknown:
        raise _fail(f"unique has unknown field(s): {', '.join(unknown)}")
    if "keys" in value and "key" in value:
        raise _fail("unique: give keys or key, not both")
    raw_keys = value.get("keys", value.get("key"))
    names = _strings(raw_keys, "keys") if raw_keys is not None else ["type"]
    keys: list[str] = []
    raw_args_keys = value.get("args_keys")
    args_keys = _strings(raw_args_keys, "args_keys") if raw_args_keys is not None else None
    for name in names:
        if name in DIMENSIONS:
            if name not in keys:
                keys.append(name)
        else:  # digest 8.24: any other name selects a key of the args objects
            args_keys = [*(args_keys or []), name]
            if "args" not in keys:
                keys.append("args")
    if "type" not in keys:  # §2.2: type is always part of the fingerprint
        keys.insert(0, "type")
    if args_keys is not None:
        if "args" not in keys:
            raise _fail("unique.args_keys needs 'args' in unique.keys", "unique.args_keys")
        present = {k for item in args if isinstance(item, dict) for k in item}
        missing = [k for k in args_keys if k not in present]
        if missing:
            raise _fail(
                f"unique.args_keys names keys that are not in args: {', '.join(missing)}",
                "unique.args_keys",
            )
    meta_keys = _strings(value["meta_keys"], "meta_keys") if value.get("meta_keys") else None
    if "meta" in keys and not meta_keys:
        raise _fail(
            "unique.keys has 'meta': unique.meta_keys must list the keys", "unique.meta_keys"
        )
    period = value.get("period")
    period_ms = None
    if period is not None:
        if not isinstance(period, str):
            raise _fail("unique.period must be an ISO 8601 duration", "unique.period")
        try:
            period_ms = parse_duration(period, field_name="unique.period")
        except ValidationError as exc:  # a retry-policy error type (422) otherwise
            raise _fail(exc.message, "unique.period") from None
        if period_ms <= 0:
            raise _fail("unique.period must be longer than zero", "unique.period")
    states = value.get("states")
    if states is None:
        states_t: tuple[str, ...] = DEFAULT_STATES
    else:
        listed = _strings(states, "states")
        bad = [s for s in listed if s not in _STATES]
        if bad or not listed:
            raise _fail(
                f"unique.states must list job states (got {', '.join(bad) or 'none'})",
                "unique.states",
            )
        states_t = tuple(dict.fromkeys(listed))
    on_conflict = value.get("on_conflict", "reject")
    on_conflict = ALIASES.get(on_conflict, on_conflict) if isinstance(on_conflict, str) else None
    if on_conflict not in ON_CONFLICT:
        raise _fail(
            f"unique.on_conflict must be one of {', '.join(ON_CONFLICT)}", "unique.on_conflict"
        )
    return UniquePolicy(
        keys=tuple(keys),
        args_keys=tuple(args_keys) if args_keys is not None else None,
        meta_keys=tuple(meta_keys) if meta_keys is not None else None,
        period_ms=period_ms,
        period=period,
        states=states_t,
        on_conflict=on_conflict,
    )


def key(rule: UniquePolicy, *, type: str, queue: str, args: list[Any], meta: dict[str, Any]) -> str:
    """The uniqueness key of a job under ``rule`` (§4): 64 lower-case hex digits."""
    parts: dict[str, Any] = {"type": type}
    if "queue" in rule.keys:
        parts["queue"] = queue
    if "args" in rule.keys:
        if rule.args_keys is None:
            parts["args"] = args
        else:
            parts["args"] = [
                {k: item[k] for k in rule.args_keys if k in item}
                if isinstance(item, dict)
                else item
                for item in args
            ]
    if "meta" in rule.keys and rule.meta_keys:
        parts["meta"] = {k: meta[k] for k in rule.meta_keys if k in meta}
    return hashlib.sha256(canonical(parts).encode("utf-8")).hexdigest()


def canonical(value: Any) -> str:
    """Canonical JSON (§4.1 step 2): sorted keys, compact, NFC strings, JCS numbers."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _normalise(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", k): _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    # RFC 8785 writes integral numbers without a fraction: 1.0 and 1 are the same value.
    if (
        isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
        and abs(value) < 1e21
    ):
        return int(value)
    return value
