"""Retry policies (OJS retry spec): ISO-8601 durations, validation, backoff and matching.

Pure: no database access. ``lifecycle.fail`` asks :func:`decide` what happens after a
failed attempt; everything here is deterministic given a random number.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django_ojs.exceptions import RetryPolicyError, ValidationError
from django_ojs.validation import INT32_MAX, MAX_DURATION_MS, check_text
from django_ojs.validation import parse_duration as parse_duration  # the grammar lives there

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_INITIAL_INTERVAL_MS = 1_000
DEFAULT_BACKOFF_COEFFICIENT = 2.0
DEFAULT_MAX_INTERVAL_MS = 300_000
DEFAULT_JITTER = True
DEFAULT_ON_EXHAUSTION = "discard"
DEFAULT_BACKOFF_STRATEGY = "exponential"

BACKOFF_STRATEGIES = ("exponential", "polynomial", "linear", "constant", "none")
ON_EXHAUSTION = ("discard", "dead_letter")
#: Handler directives that may arrive as ``error.code`` (retry §7).
HANDLER_DIRECTIVES = ("RETRY", "DISCARD", "DEAD_LETTER", "FAIL")


def format_duration(ms: int | float) -> str:
    """Render milliseconds as a compact ISO-8601 duration (``PT1S``, ``PT1M30S``, ``PT0.5S``)."""
    total = ms / 1000.0
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    out = "PT"
    if hours:
        out += f"{int(hours)}H"
    if minutes:
        out += f"{int(minutes)}M"
    if seconds or out == "PT":
        out += f"{seconds:.3f}".rstrip("0").rstrip(".") + "S"
    return out


def format_duration_days(ms: int | float) -> str:
    """Render milliseconds as an ISO-8601 duration with days (``P7D``, ``P1DT12H``,
    ``PT30M``): how retention periods read (queue config §6.3)."""
    days, rest = divmod(ms, 86_400_000)
    if not rest:
        return f"P{int(days)}D" if days else "PT0S"
    return (f"P{int(days)}D" if days else "P") + format_duration(rest)[1:]


@dataclass(frozen=True)
class RetryPolicy:
    """An effective retry policy (retry §2), with intervals in milliseconds."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_interval_ms: int = DEFAULT_INITIAL_INTERVAL_MS
    backoff_coefficient: float = DEFAULT_BACKOFF_COEFFICIENT
    max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS
    jitter: bool = DEFAULT_JITTER
    non_retryable_errors: tuple[str, ...] = field(default_factory=tuple)
    on_exhaustion: str = DEFAULT_ON_EXHAUSTION
    backoff_strategy: str = DEFAULT_BACKOFF_STRATEGY

    @classmethod
    def from_wire(cls, data: object, *, base: RetryPolicy | None = None) -> RetryPolicy:
        """Validate a wire/Python policy and merge it over ``base`` (retry §8, RET-10).

        Accepts ISO durations (``initial_interval``) and the HTTP binding's integer
        ``*_ms`` forms (the ``_ms`` form wins when both are given, digest §8.4), and
        ``backoff_type`` as an alias of ``backoff_strategy``.
        """
        base = base or cls()
        if data is None:
            return base
        if not isinstance(data, dict):
            raise RetryPolicyError("retry must be an object", field="retry")
        values: dict[str, Any] = {}
        if "max_attempts" in data:
            v = data["max_attempts"]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= INT32_MAX:
                raise RetryPolicyError(
                    f"retry.max_attempts must be an integer from 0 to {INT32_MAX}",
                    field="retry.max_attempts",
                )
            values["max_attempts"] = v
        for name in ("initial_interval", "max_interval"):
            ms = _interval_ms(data, name)
            if ms is not None:
                values[f"{name}_ms"] = ms
        if "backoff_coefficient" in data:
            v = data["backoff_coefficient"]
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or v < 1
            ):
                raise RetryPolicyError(
                    "retry.backoff_coefficient must be a number >= 1.0",
                    field="retry.backoff_coefficient",
                )
            values["backoff_coefficient"] = float(v)
        if "jitter" in data:
            if not isinstance(data["jitter"], bool):
                raise RetryPolicyError("retry.jitter must be a boolean", field="retry.jitter")
            values["jitter"] = data["jitter"]
        if "non_retryable_errors" in data:
            v = data["non_retryable_errors"]
            if not isinstance(v, list | tuple) or not all(isinstance(x, str) for x in v):
                raise RetryPolicyError(
                    "retry.non_retryable_errors must be an array of strings",
                    field="retry.non_retryable_errors",
                )
            for x in v:
                try:
                    check_text(x, "retry.non_retryable_errors")
                except ValidationError as exc:
                    raise RetryPolicyError(exc.message, field=exc.field) from None
            values["non_retryable_errors"] = tuple(v)
        if "on_exhaustion" in data:
            if data["on_exhaustion"] not in ON_EXHAUSTION:
                raise RetryPolicyError(
                    "retry.on_exhaustion must be 'discard' or 'dead_letter'",
                    field="retry.on_exhaustion",
                )
            values["on_exhaustion"] = data["on_exhaustion"]
        strategy = data.get("backoff_strategy", data.get("backoff_type"))
        if strategy is not None:
            if strategy not in BACKOFF_STRATEGIES:
                raise RetryPolicyError(
                    f"retry.backoff_strategy must be one of {', '.join(BACKOFF_STRATEGIES)}",
                    field="retry.backoff_strategy",
                )
            values["backoff_strategy"] = strategy
        policy = RetryPolicy(**{**base.__dict__, **values})
        if policy.max_interval_ms < policy.initial_interval_ms:
            raise RetryPolicyError(
                "retry.max_interval must be >= retry.initial_interval", field="retry.max_interval"
            )
        return policy

    def validated(self) -> RetryPolicy:
        """This policy, checked by the rules of :meth:`from_wire` (a Python caller built it)."""
        return RetryPolicy.from_wire(
            {
                "max_attempts": self.max_attempts,
                "initial_interval_ms": self.initial_interval_ms,
                "max_interval_ms": self.max_interval_ms,
                "backoff_coefficient": self.backoff_coefficient,
                "jitter": self.jitter,
                "non_retryable_errors": list(self.non_retryable_errors),
                "on_exhaustion": self.on_exhaustion,
                "backoff_strategy": self.backoff_strategy,
            }
        )

    def to_wire(self) -> dict[str, Any]:
        """The policy as the OJS wire shape, with ISO durations (a new dict each call)."""
        # Every rendered job carries its policy, nearly always the same few: format them
        # once (the two durations were about a sixth of rendering a job, under cProfile).
        # Keyed by the coefficient's type too: a policy with 2 equals one with 2.0, and
        # each renders as it was given.
        wire = _wire_of(self, type(self.backoff_coefficient).__name__)
        return {**wire, "non_retryable_errors": list(wire["non_retryable_errors"])}

    def backoff_ms(self, retry_number: int, rand: float | None = None) -> int:
        """Delay before retry ``retry_number`` (1 = the first retry), in ms (retry §3, §5).

        ``rand`` in ``[0, 1)`` drives the jitter; pass it to make the result exact.
        """
        n = max(1, retry_number)
        base = float(self.initial_interval_ms)
        c = self.backoff_coefficient
        try:
            if self.backoff_strategy == "exponential":
                raw = base * c ** (n - 1)
            elif self.backoff_strategy == "polynomial":
                raw = base * n**c
            elif self.backoff_strategy == "linear":
                raw = base * n
            else:
                raw = base
        except OverflowError:  # a huge coefficient: the cap applies
            raw = math.inf
        cap = float(self.max_interval_ms)
        delay = min(raw, cap)
        if self.jitter:
            r = random.random() if rand is None else rand  # noqa: S311 - jitter, not crypto
            delay = min(delay * (0.5 + r), cap)  # RET-06: cap again after jitter
        return round(delay)

    def is_non_retryable(self, error_type: str | None, error_code: str | None = None) -> bool:
        """True when the error matches ``non_retryable_errors`` (retry §6).

        Exact match, or a ``prefix.*`` entry matching types that start with ``prefix.``.
        The type is matched first; the code is the fallback (digest §0.1 item 6).
        """
        for candidate in (error_type, error_code):
            if not candidate:
                continue
            for pattern in self.non_retryable_errors:
                if pattern == candidate:
                    return True
                if pattern.endswith(".*") and candidate.startswith(pattern[:-1]):
                    return True
        return False


def _interval_ms(data: dict[str, Any], name: str) -> int | None:
    ms_key = f"{name}_ms"
    if ms_key in data and data[ms_key] is not None:
        v = data[ms_key]
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= MAX_DURATION_MS:
            raise RetryPolicyError(
                f"retry.{ms_key} must be a positive number of milliseconds, at most "
                f"{MAX_DURATION_MS} (100 years)",
                field=f"retry.{ms_key}",
            )
        return round(v)
    if name in data and data[name] is not None:
        v = data[name]
        if isinstance(v, timedelta):
            ms = round(v.total_seconds() * 1000)
            if ms > MAX_DURATION_MS:
                raise RetryPolicyError(
                    f"retry.{name} must be at most 100 years", field=f"retry.{name}"
                )
        else:
            ms = parse_duration(v, field_name=f"retry.{name}")
        if ms <= 0:
            raise RetryPolicyError(f"retry.{name} must be greater than zero", field=f"retry.{name}")
        return ms
    return None


@dataclass(frozen=True)
class Decision:
    """What happens to a job after a failed attempt."""

    state: str  # "retryable", "available" or "discarded"
    delay_ms: int = 0
    dead_letter: bool = False
    reason: str = ""


def decide(
    policy: RetryPolicy,
    attempt: int,
    *,
    error_type: str | None,
    error_code: str | None = None,
    retryable: bool | None = None,
    rand: float | None = None,
) -> Decision:
    """Decide the next state after failed attempt number ``attempt`` (retry §7-§9).

    ``retryable=False`` or a non-retryable match ends the job now; handler directives
    (``DISCARD``/``FAIL``/``DEAD_LETTER``/``RETRY`` as ``error_code``) override the policy.
    """
    dead_letter = policy.on_exhaustion == "dead_letter"
    if error_code == "DEAD_LETTER":
        return Decision("discarded", dead_letter=True, reason="dead_letter")
    if error_code in ("DISCARD", "FAIL"):
        return Decision("discarded", dead_letter=False, reason=error_code.lower())
    if retryable is False:
        return Decision("discarded", dead_letter=dead_letter, reason="non_retryable")
    if policy.is_non_retryable(error_type, error_code):
        return Decision("discarded", dead_letter=dead_letter, reason="non_retryable")
    # max_attempts counts every execution including the first; 0 and 1 both mean "once".
    if attempt >= max(policy.max_attempts, 1):
        return Decision("discarded", dead_letter=dead_letter, reason="exhausted")
    return Decision("retryable", delay_ms=policy.backoff_ms(attempt, rand))


@functools.lru_cache(maxsize=256)
def _wire_of(policy: RetryPolicy, coefficient_type: str) -> dict[str, Any]:
    """:meth:`RetryPolicy.to_wire`, made once per distinct policy (copied by the caller)."""
    return {
        "max_attempts": policy.max_attempts,
        "initial_interval": format_duration(policy.initial_interval_ms),
        "backoff_coefficient": policy.backoff_coefficient,
        "max_interval": format_duration(policy.max_interval_ms),
        "jitter": policy.jitter,
        "non_retryable_errors": tuple(policy.non_retryable_errors),
        "on_exhaustion": policy.on_exhaustion,
        "backoff_strategy": policy.backoff_strategy,
    }
