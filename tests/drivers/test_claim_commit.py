"""A fetch's own transaction commits its claim without waiting for the WAL flush.

A claim lost in a database crash leaves its job ``available``, to be claimed again, so a
fetch that runs in a transaction of its own sets PostgreSQL's ``synchronous_commit`` off
for that transaction (``Driver.claim(durable=False)``). A caller's transaction keeps its
setting, and ``OJS_CLAIM_SYNCHRONOUS_COMMIT = True`` keeps every claim synchronous.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle
from django_ojs.drivers import EventMode, get_driver
from django_ojs.models import Job
from django_ojs.policy import configured

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

RELAX = "set_config('synchronous_commit', 'off', true)"


def synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def claim(*, durable: bool) -> list[Job]:
    written = get_driver("default").claim(
        "default", 5, worker_id="w-1", now=timezone.now(), visibility_ms=None,
        defaults=configured(), fields=None, events=EventMode.STORE, source="ojs://t",
        durable=durable,
    )  # fmt: skip
    return written.jobs


def claims(ctx: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if "FOR UPDATE SKIP LOCKED" in q["sql"]]


def test_a_relaxed_claim_turns_synchronous_commit_off_for_its_transaction_only():
    django_ojs.enqueue("commit.a", [1])
    assert synchronous_commit() == "on"
    with transaction.atomic():
        (job,) = claim(durable=False)
        assert job.state == "active"
        assert synchronous_commit() == "off"
    assert synchronous_commit() == "on"
    assert Job.objects.get(pk=job.pk).state == "active"


def test_a_durable_claim_leaves_the_setting_alone():
    django_ojs.enqueue("commit.d", [1])
    with transaction.atomic():
        (job,) = claim(durable=True)
        assert synchronous_commit() == "on"
    assert Job.objects.get(pk=job.pk).state == "active"


@pytest.mark.parametrize("register", [False, True], ids=["worker-fetch", "http-fetch"])
def test_a_fetch_of_its_own_relaxes_its_claim(register):
    pushed = django_ojs.enqueue("commit.own", [1])
    with CaptureQueriesContext(connection) as q:
        (job,) = lifecycle.fetch(["default"], 3, worker_id="w-own", register=register)
    assert job.id == pushed.id
    (sql,) = claims(q)
    assert RELAX in sql
    assert synchronous_commit() == "on"  # local to the fetch's transaction
    assert Job.objects.get(pk=job.pk).state == "active"


def test_a_fetch_in_the_callers_transaction_keeps_its_setting():
    django_ojs.enqueue("commit.caller", [1])
    with transaction.atomic(), CaptureQueriesContext(connection) as q:
        (job,) = lifecycle.fetch(["default"], 1, worker_id="w-caller", register=False)
        assert synchronous_commit() == "on"
    assert all(RELAX not in sql for sql in claims(q)) and claims(q)
    assert Job.objects.get(pk=job.pk).state == "active"


def test_the_setting_keeps_every_claim_synchronous(settings):
    settings.OJS_CLAIM_SYNCHRONOUS_COMMIT = True
    django_ojs.enqueue("commit.setting", [1])
    with CaptureQueriesContext(connection) as q:
        (job,) = lifecycle.fetch(["default"], 1, worker_id="w-setting", register=False)
    assert claims(q) and all(RELAX not in sql for sql in claims(q))
    assert Job.objects.get(pk=job.pk).state == "active"
