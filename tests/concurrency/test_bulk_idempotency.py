"""Concurrent bulk requests with one idempotency key: the work is done once.

Eight threads send the same bulk enqueue with the same key at the same instant, each on
its own database connection. Exactly one runs it (its jobs exist once); every other gets
either the stored answer (a replay, the same job ids) or 409 while the first still runs,
never a second set of jobs or a 500.
"""

from __future__ import annotations

import pytest

from django_ojs.models import IdempotencyKey, Job
from tests.integration.api_support import client
from tests.threads import run_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgresql]


def test_one_key_sent_by_eight_threads_at_once_runs_once():
    body = {
        "idempotency_key": "import-7",
        "jobs": [{"type": "user.import", "args": [{"n": n}]} for n in range(50)],
    }
    clients = [client("producer") for _ in range(8)]
    answers: list = [None] * 8

    def send(index: int) -> None:
        answers[index] = clients[index].post("/jobs/bulk", body)

    run_threads(8, send)

    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {201, 409}, [a.body for a in answers]
    first = [a for a in answers if a.status_code == 201 and "Idempotent-Replayed" not in a]
    assert len(first) == 1
    replays = [a for a in answers if a.status_code == 201 and "Idempotent-Replayed" in a]
    assert all(r.body == first[0].body for r in replays)
    for conflict in (a for a in answers if a.status_code == 409):
        assert conflict.body["error"]["details"]["reason"] == "in_progress"
    assert Job.objects.count() == 50
    created = {item["job"]["id"] for item in first[0].body["items"]}
    assert created == {str(i) for i in Job.objects.values_list("id", flat=True)}
    assert IdempotencyKey.objects.get().status == 201
