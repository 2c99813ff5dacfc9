"""How the worker package is built: its imports, its pipe messages, what a fetch loads.

The worker talks to the database through the ``lifecycle`` facade only, its modules
import no private names and form no import circle, the process pool's messages survive
pickling (they cross a pipe), and attempts take their deadlines from the claim.
"""

from __future__ import annotations

import ast
import pickle
import threading
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_ojs
from django_ojs import lifecycle
from django_ojs.context import JobContext
from django_ojs.policy import configured, effective, ms_delta
from django_ojs.registry import registry
from django_ojs.worker import attempt as attempts
from django_ojs.worker import messages
from django_ojs.worker.fetcher import FETCH_FIELDS, TERMINATE, Fetcher
from django_ojs.worker.inflight import InFlight

WORKER = Path(django_ojs.__file__).parent / "worker"
PACKAGE = "django_ojs.worker"


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` for every import in ``path`` (names empty for ``import x``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
    return found


def worker_modules() -> dict[str, Path]:
    return {f"{PACKAGE}.{p.stem}": p for p in WORKER.glob("*.py") if p.stem != "__init__"}


def test_worker_modules__form_no_import_circle():
    modules = worker_modules()
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module, names in imports_of(path):
            if module in modules:
                targets.add(module)
            elif module == PACKAGE:
                targets.update(f"{PACKAGE}.{n}" for n in names if f"{PACKAGE}.{n}" in modules)
        edges[name] = targets

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            raise AssertionError("import circle: " + " → ".join(cycle))
        for target in edges[node]:
            visit(target, [*path, node])

    for module in modules:
        visit(module, [])


def test_worker_modules__import_no_private_names_and_talk_through_lifecycle_only():
    for name, path in worker_modules().items():
        for module, names in imports_of(path):
            private = [n for n in names if n.startswith("_") and n != "__future__"]
            assert not private, f"{name} imports private {private} from {module}"
            assert not module.startswith("django_ojs.lifecycle."), f"{name} imports {module}"
            assert not module.startswith("django_ojs.drivers"), f"{name} imports {module}"


@pytest.mark.parametrize(
    "message",
    [
        messages.RunJob("j", 1, "a.b", [1, {"x": 2}], "default"),
        messages.CancelJob("j", "timeout", {"type": "timeout"}, False),
        messages.BeatReply("j", alive=False),
        messages.Ready(4242),
        messages.Beat("j"),
        messages.Progress("j", 0.5, "half", {"rows": 1}),
        messages.Done("j", messages.Outcome(False, error={"type": "x"}, requeue=True)),
    ],
)
def test_messages__are_frozen_and_survive_a_pipe(message):
    assert pickle.loads(pickle.dumps(message)) == message
    with pytest.raises(AttributeError):
        message.pid = 0  # type: ignore[misc]


@pytest.mark.django_db
def test_fetch_fields__cover_everything_the_worker_reads_from_a_claimed_job():
    django_ojs.enqueue("structure.job", [1], timeout=3, grace_period=2)
    (job,) = lifecycle.fetch(["default"], 1, worker_id="w1", fields=FETCH_FIELDS)
    ctx = JobContext({"id": str(job.id)})
    with CaptureQueriesContext(connection) as queries:
        durations = effective(job, defaults=configured())
        attempts.build(job, handler=None, ctx=ctx, durations=durations, clock=attempts.Clock())
        _ = (job.visible_until, job.stalled_at, job.args, job.type, job.attempt)
    assert not queries.captured_queries  # a deferred field would cost a query per job


@pytest.mark.django_db
def test_attempt__deadlines_are_the_stored_ones_on_the_monotonic_clock():
    django_ojs.enqueue("structure.job", timeout=3, grace_period=2)
    (job,) = lifecycle.fetch(["default"], 1, worker_id="w1", fields=FETCH_FIELDS)
    # Pretend the claim happened a while ago, with a deadline the settings would not give.
    job.started_at -= ms_delta(10_000)
    job.timeout_at = job.started_at + ms_delta(4_000)
    clock = attempts.Clock()
    durations = effective(job, defaults=configured())
    attempt = attempts.build(
        job, handler=None, ctx=JobContext({"id": str(job.id)}), durations=durations, clock=clock
    )
    started = clock.mono + (job.started_at - clock.wall).total_seconds()
    assert attempt.started == pytest.approx(started)
    assert attempt.hard_at == pytest.approx(started + 4.0)  # the stored timeout_at
    assert attempt.soft_at == pytest.approx(started + 2.0)  # minus the 2 s grace period
    assert (attempt.timeout, attempt.grace) == (3.0, 2.0)  # reported in timeout errors
    assert attempt.elapsed() >= 10.0
    assert attempt.hard_at < time.monotonic()  # overdue: the supervisor acts at once


def test_thread_pool__a_stop_while_runners_are_still_starting_ends_every_runner():
    import threading
    import time

    from django_ojs.worker.pool import ThreadPool

    pool = ThreadPool(200, lambda attempt, outcome: None, name="ojs-runner-stoptest")
    pool.start()
    pool.stop()  # at once: the starter may still be starting runners
    deadline = time.monotonic() + 120  # a wait for the threads to end, not a speed check
    alive = [t for t in threading.enumerate() if t.name.startswith("ojs-runner-stoptest")]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [t for t in threading.enumerate() if t.name.startswith("ojs-runner-stoptest")]
    assert alive == []
    assert pool._count <= 200


@pytest.mark.django_db
def test_fetcher__more_free_slots_than_one_fetch_may_claim_fetches_again_before_waiting():
    """A worker with over 1,000 free slots claims 1,000 (the fetch limit), then fetches
    the rest at once instead of sleeping on the listener as if the queue were empty."""
    django_ojs.enqueue_many([{"type": "structure.many", "args": [i]} for i in range(1_200)])
    submitted: list[object] = []
    waited_after: list[int] = []
    state = ["running"]

    class Pool:
        def submit(self, attempt: object) -> None:
            submitted.append(attempt)

    class Listener:
        def wait(self, timeout: float) -> bool:
            waited_after.append(len(submitted))
            state[0] = TERMINATE
            return False

    fetcher = Fetcher(
        "w-many", queues=["default"], concurrency=1_500, poll_interval=30.0,
        handlers=registry, inflight=InFlight(lambda *a: None, lambda *a: None),
        pool=Pool(), state=lambda: state[0], wakeup=threading.Event(),
        beat=lambda: None, progress=lambda *a: None, using="default",
    )  # fmt: skip
    fetcher.run(Listener())
    assert waited_after == [1_200]


def _attempt(n: int) -> attempts.Attempt:
    ctx = JobContext({"id": f"j{n}"}, attempt=1)
    return attempts.Attempt(
        job_id=f"j{n}", attempt=1, type="x", args=[], handler=None, ctx=ctx,
        timeout=1.0, grace=0.0, started=0.0, hard_at=1.0,
    )  # fmt: skip


def test_inflight__wakes_the_fetcher_when_a_full_worker_frees_a_slot_and_at_a_batch():
    """A fetcher gathering free slots for one claim is woken when the first slot of a
    full worker frees up and again once a batch is free, not by every handler between."""

    def wakes(inflight: InFlight, changed: threading.Event, count: int) -> list[int]:
        running = [_attempt(n) for n in range(count)]
        for attempt in running:
            inflight.add(attempt)
        woken = []
        for attempt in running:
            changed.clear()
            inflight.finish(attempt, messages.Outcome(True))
            if changed.is_set():
                woken.append(len(inflight))  # slots still taken after this one
        return woken

    changed = threading.Event()
    inflight = InFlight(lambda *a: None, changed)
    inflight.wake_when(capacity=8, batch=4)
    assert wakes(inflight, changed, 8) == [7, 4, 3, 2, 1, 0]
    assert set(inflight.pending) == {f"j{n}" for n in range(8)}  # every outcome queued
    assert wakes(inflight, changed, 6) == [4, 3, 2, 1, 0]  # not full: from the batch on

    every = InFlight(lambda *a: None, changed)  # not told: every slot wakes
    assert wakes(every, changed, 3) == [2, 1, 0]
