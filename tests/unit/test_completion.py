"""The outcome writer's batching: a refused outcome is isolated, the others are written.

``lifecycle`` is replaced by a fake that refuses (``DataError``) every write holding a
poisoned item, the way PostgreSQL refuses a whole statement for one unstorable value, so
these tests run without a database. The real refusal is in
``tests/integration/test_worker_batch.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, OperationalError

from django_ojs import resilience
from django_ojs.worker import completion
from django_ojs.worker.messages import Outcome


class FakeLifecycle:
    """Records writes; refuses a write that contains a poisoned job id."""

    def __init__(self, poison: set[Any], *, unreachable: int = 0):
        self.poison = poison
        self.unreachable = unreachable  # how many calls fail as if the connection was lost
        self.acked: dict[Any, Any] = {}
        self.failed: dict[Any, Any] = {}
        self.calls = 0

    def _check(self, items: list[Any]) -> None:
        self.calls += 1
        if self.unreachable:
            self.unreachable -= 1
            raise OperationalError("server closed the connection unexpectedly")
        if any(item[0] in self.poison for item in items):
            raise DataError("unsupported Unicode escape sequence")

    def ack_many(self, items: list[Any], *, worker_id: str, using: Any) -> list[Any]:
        self._check(items)
        self.acked.update({job_id: result for job_id, _, result in items})
        return [job_id for job_id, _, _ in items]

    def fail_many(self, items: list[Any], *, worker_id: str, using: Any) -> list[Any]:
        if any(error.get("type", "").endswith("not_storable") for _, _, error, _ in items):
            self.calls += 1  # the replacement error is always storable
        else:
            self._check(items)
        self.failed.update({job_id: error for job_id, _, error, _ in items})
        return [job_id for job_id, _, _, _ in items]


@pytest.fixture
def fake(monkeypatch):
    def install(poison: set[Any], **options: Any) -> FakeLifecycle:
        lc = FakeLifecycle(poison, **options)
        monkeypatch.setattr(completion, "lifecycle", lc)
        return lc

    return install


@pytest.fixture
def no_sleep(monkeypatch):
    """Fail the test if the writer waits: a refused batch must not be retried later."""

    def sleep(seconds: float) -> None:
        raise AssertionError(f"the writer slept {seconds}s")

    monkeypatch.setattr(resilience.time, "sleep", sleep)  # the back-off sleeps there


def write(outcomes: list[tuple[Any, int, Outcome]]) -> tuple[completion.Completer, list[Any]]:
    written: list[Any] = []
    completer = completion.Completer("w1", using=None, on_written=written.extend)
    completer.start()
    for job_id, attempt, outcome in outcomes:
        completer.put(job_id, attempt, outcome)
    completer.stop(timeout=30)
    return completer, written


def test_a_refused_ack_is_failed_alone_and_the_others_are_written_at_once(fake, no_sleep):
    lc = fake({"p"})
    good = [(f"j{i}", 1, Outcome(True, result=i)) for i in range(200)]
    completer, written = write([*good[:77], ("p", 1, Outcome(True, result="x")), *good[77:]])
    assert lc.acked == {f"j{i}": i for i in range(200)}
    error = lc.failed["p"]
    assert error["type"] == "result_not_storable" and error["retryable"] is False
    assert "DataError: unsupported Unicode escape sequence" in error["message"]
    assert completer.completed == 200 and completer.failed == 1 and completer.ignored == 0
    assert len(written) == 201
    assert lc.calls < 40  # bisected: about 2 log2(201) refused writes, not one per item


def test_a_refused_failure_is_recorded_as_error_not_storable(fake, no_sleep):
    lc = fake({"p"})
    outcomes = [
        ("a", 1, Outcome(True, result=1)),
        ("p", 2, Outcome(False, error={"type": "ValueError", "message": "m"}, requeue=True)),
        ("b", 1, Outcome(False, error={"type": "ValueError", "message": "n"})),
    ]
    completer, _ = write(outcomes)
    assert lc.acked == {"a": 1}
    assert lc.failed["b"]["message"] == "n"
    assert lc.failed["p"]["type"] == "error_not_storable" and "retryable" not in lc.failed["p"]
    assert completer.completed == 1 and completer.failed == 2


def test_a_lost_connection_retries_the_whole_batch(fake, monkeypatch):
    monkeypatch.setattr(resilience.time, "sleep", lambda seconds: None)
    lc = fake(set(), unreachable=2)
    completer, _ = write([(f"j{i}", 1, Outcome(True, result=i)) for i in range(10)])
    assert lc.acked == {f"j{i}": i for i in range(10)}
    assert lc.calls == 3 and completer.completed == 10 and not lc.failed
