"""Fair distribution across a worker pool's queues (OJS fair scheduling §6-§8); pure.

A :class:`Policy` is what a pool says: its queues, a strategy (``strict``,
``round-robin``, ``weighted``, ``least-loaded``), queue weights and starvation
prevention. A :class:`Scheduler` holds the state one process keeps for one policy and
decides, for each FETCH, which queues to claim from and how many jobs from each
(:meth:`Scheduler.plan`); the caller claims and tells it what it got
(:meth:`Scheduler.record`). No database here: the claims are ``lifecycle``'s.

Round-robin and weighted use smooth weighted round-robin (nginx's): every dispatch adds
each queue's weight to its credit and takes the sum of the weights from the credit of the
queue served, so with weights 3:1 two busy queues are served ``a a b a``, exactly 3:1 in
every 4 dispatches, whatever the fetch sizes. A queue found empty loses its credit (it
does not save up a burst while idle). Each process keeps its own credits: every process
serving 3:1 makes the sum 3:1.

Starvation prevention (§8) puts first, before the strategy's choice, a queue that got
less than ``min_dispatch_ratio`` of the dispatches of the last ``rotation_interval`` (of
those made while it had jobs), or none at all for a whole ``rotation_interval``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_ojs.exceptions import OJSError, ValidationError
from django_ojs.validation import parse_duration, validate_queues

STRICT, ROUND_ROBIN, WEIGHTED, LEAST_LOADED = "strict", "round-robin", "weighted", "least-loaded"
STRATEGIES = (STRICT, ROUND_ROBIN, WEIGHTED, LEAST_LOADED)
#: §6.1: a pool's strategy when it names none.
DEFAULT_STRATEGY = ROUND_ROBIN
#: §8.1's defaults.
DEFAULT_ROTATION_INTERVAL = 30.0
DEFAULT_MIN_DISPATCH_RATIO = 0.05
#: A weight is a positive integer (§6.1); this bound keeps credits small integers.
MAX_WEIGHT = 1_000_000
#: At most this many queues in one pool (each is a claim statement at worst).
MAX_QUEUES = 100


@dataclass(frozen=True)
class Starvation:
    """§8.1's ``starvation_prevention`` object."""

    enabled: bool = False
    rotation_interval: float = DEFAULT_ROTATION_INTERVAL  # seconds
    min_dispatch_ratio: float = DEFAULT_MIN_DISPATCH_RATIO

    def to_wire(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "rotation_interval": iso_seconds(self.rotation_interval),
            "min_dispatch_ratio": self.min_dispatch_ratio,
        }


@dataclass(frozen=True)
class Policy:
    """How a pool's fetches choose among its queues."""

    queues: tuple[str, ...]
    strategy: str = DEFAULT_STRATEGY
    #: Weights of the ``weighted`` strategy (every queue has one; 1 when not given).
    weights: Mapping[str, int] = field(default_factory=dict)
    starvation: Starvation = Starvation()

    def weight(self, queue: str) -> int:
        if self.strategy != WEIGHTED:
            return 1
        return self.weights.get(queue, 1)


def iso_seconds(seconds: float) -> str:
    """``PT30S``-style ISO 8601 duration of a number of seconds."""
    whole = int(seconds)
    if whole == seconds:
        return f"PT{whole}S"
    return f"PT{seconds:g}S"


def parse_queues(value: Any, weights: Any = None) -> tuple[list[str], dict[str, int]]:
    """A pool's queues and weights, from either form clients send.

    §6.1: ``queues`` an array and ``weights`` an object of queue → positive integer. The
    conformance suite (EXT-FS-001) sends ``queues`` as an object, ``{"high": {"weight":
    70}}`` (or ``{"high": 70}``); its order is the queues' order.
    """
    parsed: dict[str, int] = {}
    names: list[str]
    if isinstance(value, Mapping):
        names = validate_queues(list(value), field="queues")
        for name in names:
            spec = value[name]
            if isinstance(spec, Mapping):
                if set(spec) - {"weight"}:
                    raise ValidationError(
                        f"queues.{name} may only have a weight", field=f"queues.{name}"
                    )
                if "weight" in spec:
                    parsed[name] = _weight(spec["weight"], f"queues.{name}.weight")
            elif spec is not None:
                parsed[name] = _weight(spec, f"queues.{name}")
    else:
        names = validate_queues(value, field="queues")
    if len(set(names)) != len(names):
        raise ValidationError("queues must not name a queue twice", field="queues")
    if len(names) > MAX_QUEUES:
        raise ValidationError(f"a pool has at most {MAX_QUEUES} queues", field="queues")
    if weights is not None:
        if not isinstance(weights, Mapping):
            raise ValidationError("weights must be an object of queue: weight", field="weights")
        for name, w in weights.items():
            if name not in names:
                raise ValidationError(
                    f"weights names '{name}', which is not one of the queues",
                    field=f"weights.{name}",
                )
            parsed[name] = _weight(w, f"weights.{name}")
    return names, parsed


def _weight(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ValidationError(
            f"{name} must be a positive integer (at most {MAX_WEIGHT})", field=name
        )
    return value


def parse_strategy(value: Any, *, name: str = "strategy") -> str:
    if value is None:
        return DEFAULT_STRATEGY
    if value not in STRATEGIES:
        raise ValidationError(f"{name} must be one of {', '.join(STRATEGIES)}", field=name)
    return str(value)


def parse_starvation(value: Any) -> Starvation:
    """§8.1's object (``rotation_interval`` an ISO 8601 duration or seconds)."""
    if value is None:
        return Starvation()
    if not isinstance(value, Mapping):
        raise ValidationError(
            "starvation_prevention must be an object", field="starvation_prevention"
        )
    unknown = set(value) - {"enabled", "rotation_interval", "min_dispatch_ratio"}
    if unknown:
        raise ValidationError(
            f"starvation_prevention has unknown fields: {', '.join(sorted(unknown))}",
            field="starvation_prevention",
        )
    enabled = value.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ValidationError(
            "starvation_prevention.enabled must be true or false",
            field="starvation_prevention.enabled",
        )
    interval = value.get("rotation_interval", DEFAULT_ROTATION_INTERVAL)
    where = "starvation_prevention.rotation_interval"
    if isinstance(interval, str):
        try:
            seconds = parse_duration(interval, field_name=where) / 1000
        except OJSError as exc:
            raise ValidationError(
                f"{where} must be an ISO 8601 duration such as PT30S", field=where
            ) from exc
    elif isinstance(interval, int | float) and not isinstance(interval, bool):
        seconds = float(interval)
    else:
        raise ValidationError(f"{where} must be an ISO 8601 duration", field=where)
    if not math.isfinite(seconds) or not 1 <= seconds <= 86400:
        raise ValidationError(f"{where} must be from 1 second to 1 day", field=where)
    ratio = value.get("min_dispatch_ratio", DEFAULT_MIN_DISPATCH_RATIO)
    where = "starvation_prevention.min_dispatch_ratio"
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
        raise ValidationError(f"{where} must be a number from 0.0 to 1.0", field=where)
    return Starvation(enabled, seconds, float(ratio))


def policy(
    queues: Any,
    *,
    strategy: Any = None,
    weights: Any = None,
    starvation: Any = None,
) -> Policy:
    """A validated :class:`Policy` from wire values (raises ``ValidationError``)."""
    names, parsed = parse_queues(queues, weights)
    chosen = parse_strategy(strategy)
    if starvation is not None and not isinstance(starvation, Starvation):
        starvation = parse_starvation(starvation)
    return Policy(tuple(names), chosen, parsed, starvation or Starvation())


class Scheduler:
    """One process's scheduling state for one :class:`Policy` (thread-safe)."""

    def __init__(self, rules: Policy, *, clock: Callable[[], float] = time.monotonic):
        self.policy = rules
        self.clock = clock
        self.credit = dict.fromkeys(rules.queues, 0)
        self.lock = threading.Lock()
        start = clock()
        #: Starvation prevention: dispatches per whole second of ``clock``, in order.
        self.buckets: deque[tuple[int, dict[str, int]]] = deque()
        #: When each queue was last served, or last found without jobs.
        self.last_served = dict.fromkeys(rules.queues, start)
        self.empty_at: dict[str, float] = {}
        #: Dispatches this scheduler made per queue (since it was made), and in all.
        self.dispatched = dict.fromkeys(rules.queues, 0)
        self.total = 0
        #: ``total`` when each queue was last served or found without jobs.
        self.mark: dict[str, int] = {}
        #: Queues the last plans put first because they had no dispatch for a whole
        #: rotation interval, with how long (seconds): :meth:`take_starved` empties it.
        self.starved: dict[str, float] = {}

    # ------------------------------------------------------------------ planning
    def plan(self, count: int, backlog: Mapping[str, int] | None = None) -> list[tuple[str, int]]:
        """How many jobs to ask of which queue, in order; the counts add up to ``count``.

        ``backlog`` (available jobs per queue) is read by ``least-loaded`` only. The
        caller claims in this order and then, when some queue had fewer jobs than asked,
        fills the rest from :meth:`fallback`.
        """
        rules = self.policy
        with self.lock:
            owed = self._owed(count) if rules.starvation.enabled else {}
            left = count - sum(owed.values())
            planned: dict[str, int] = dict(owed)
            if left > 0:
                if rules.strategy in (ROUND_ROBIN, WEIGHTED):
                    for queue, n in self._rotate(left).items():
                        planned[queue] = planned.get(queue, 0) + n
                else:
                    first = self._order(backlog)[0]
                    planned[first] = planned.get(first, 0) + left
        return [(q, n) for q, n in planned.items() if n > 0]

    def fallback(self, backlog: Mapping[str, int] | None = None) -> list[str]:
        """Every queue, in the order to fill a shortfall: the strategy's preference."""
        if self.policy.strategy in (ROUND_ROBIN, WEIGHTED):
            with self.lock:
                # Who the rotation would serve next first (stable: ties keep the order).
                return sorted(
                    self.policy.queues, key=lambda q: -self.credit[q] - self.policy.weight(q)
                )
        return self._order(backlog)

    def _order(self, backlog: Mapping[str, int] | None) -> list[str]:
        queues = list(self.policy.queues)
        if self.policy.strategy == LEAST_LOADED and backlog is not None:
            # §7.2: the deepest backlog first; ties keep the pool's order.
            queues.sort(key=lambda q: -backlog.get(q, 0))
        return queues

    def _rotate(self, count: int) -> dict[str, int]:
        """``count`` picks of smooth weighted round-robin, on a copy of the credits."""
        rules = self.policy
        credit = dict(self.credit)
        total = sum(rules.weight(q) for q in rules.queues)
        picks: dict[str, int] = {}
        for _ in range(count):
            for q in rules.queues:
                credit[q] += rules.weight(q)
            best = max(rules.queues, key=lambda q: credit[q])  # first of equals
            credit[best] -= total
            picks[best] = picks.get(best, 0) + 1
        return picks

    def _owed(self, count: int) -> dict[str, int]:
        """Starvation prevention: dispatches owed to queues before the strategy's."""
        rules, now = self.policy, self.clock()
        interval = rules.starvation.rotation_interval
        ratio = rules.starvation.min_dispatch_ratio
        self._forget(now - interval)
        owed: dict[str, int] = {}
        budget = count
        # The queue waiting longest since it was served (or found empty) first.
        for queue in sorted(rules.queues, key=self._seen):
            if budget <= 0:
                break
            since = max(now - interval, self.empty_at.get(queue, -math.inf))
            total = mine = 0
            for second, counts in self.buckets:
                if second + 1 > since:
                    total += sum(counts.values())
                    mine += counts.get(queue, 0)
            need = math.ceil(ratio * (total + count) - 1e-9) - mine if ratio > 0 else 0
            # Waiting a whole interval while other queues were served (an idle pool,
            # whose fetches find nothing or do not come, starves nobody).
            if now - self._seen(queue) >= interval and self.total > self.mark.get(queue, 0):
                need = max(need, 1)  # §8.1: served at least once per rotation interval
                self.starved[queue] = now - self._seen(queue)
            if need > 0:
                owed[queue] = min(need, budget)
                budget -= owed[queue]
        return owed

    def take_starved(self, served: Mapping[str, int]) -> dict[str, float]:
        """The starved queues (§11.1 ``scheduling.queue_starved``) that the last plans
        forced and that were served, with how long they had waited (seconds)."""
        with self.lock:
            found = {q: d for q, d in self.starved.items() if served.get(q)}
            self.starved.clear()
        return found

    def _seen(self, queue: str) -> float:
        """When ``queue`` was last served or found without jobs."""
        return max(self.last_served[queue], self.empty_at.get(queue, -math.inf))

    def _forget(self, before: float) -> None:
        while self.buckets and self.buckets[0][0] + 1 <= before:
            self.buckets.popleft()

    # ----------------------------------------------------------------- recording
    def record(self, claimed: Mapping[str, int], empty: Sequence[str] = ()) -> None:
        """What the claims got per queue, and the queues found without (claimable) jobs."""
        rules = self.policy
        now = self.clock()
        with self.lock:
            n = sum(claimed.values())
            for queue in empty:
                if queue in self.credit:
                    self.credit[queue] = 0
                    self.empty_at[queue] = now
            busy = [q for q in rules.queues if q not in empty]
            total = sum(rules.weight(q) for q in busy)
            if n and busy:
                for q in busy:
                    self.credit[q] += n * rules.weight(q)
                for q, k in claimed.items():
                    if q in self.credit and q not in empty:
                        self.credit[q] -= k * total
            self.total += n
            for q, k in claimed.items():
                if k and q in self.dispatched:
                    self.dispatched[q] += k
                    self.last_served[q] = now
                    self.mark[q] = self.total
            for queue in empty:
                self.mark[queue] = self.total
            if rules.starvation.enabled and n:
                second = int(now)
                if not self.buckets or self.buckets[-1][0] != second:
                    self.buckets.append((second, {}))
                counts = self.buckets[-1][1]
                for q, k in claimed.items():
                    if k:
                        counts[q] = counts.get(q, 0) + k
