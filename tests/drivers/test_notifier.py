"""The pushers' NOTIFY after commit (drivers/postgresql/notifier.py), on PostgreSQL.

A push alone in its process NOTIFYs in its own statement; a push while another runs, and
a push inside a transaction, leave the NOTIFY to the process's notifier, after the commit.
Every test waits on a real LISTEN connection.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

import django_ojs
from django_ojs.drivers import get_driver
from django_ojs.drivers.postgresql import notifier as notifier_module
from django_ojs.drivers.postgresql.listener import connection_params
from django_ojs.drivers.postgresql.notifier import APPLICATION_NAME, notifier, pushes
from tests.acceptance.conftest import database_url

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def listen():
    """Listeners on some queues, closed after the test (with the notifier's connection)."""
    made = []

    def make(*queues: str):
        listener = get_driver("default").listener(list(queues))
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()
    notifier_module.release_all()
    connection.close()


def notifier_backends() -> list[int]:
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            [APPLICATION_NAME, connection.settings_dict["NAME"]],
        ).fetchall()
    return [pid for (pid,) in rows]


def pushed_sql(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "INSERT INTO" in q["sql"]]


def test_a_push_alone_notifies_in_its_own_statement(listen):
    listener = listen("alone-q")
    with CaptureQueriesContext(connection) as queries:
        django_ojs.enqueue("n.alone", queue="alone-q")
    assert ["pg_notify" in sql for sql in pushed_sql(queries)] == [True]
    assert listener.wait(10) is True


def test_a_push_beside_another_leaves_the_notify_to_the_notifier(listen):
    listener = listen("busy-q")
    with pushes.alone() as first:  # another push of this process is under way
        assert first is True
        with CaptureQueriesContext(connection) as queries:
            django_ojs.enqueue("n.busy", queue="busy-q")
    assert ["pg_notify" in sql for sql in pushed_sql(queries)] == [False]
    assert listener.wait(10) is True  # sent by the notifier, after the commit
    assert notifier_backends(), "the notifier's connection is named in pg_stat_activity"


def test_a_push_in_a_transaction_wakes_after_its_commit_only(listen):
    listener = listen("tx-q")
    with transaction.atomic():
        django_ojs.enqueue("n.tx", queue="tx-q")
        assert listener.wait(0.3) is False  # not before the commit
    assert listener.wait(10) is True
    with pytest.raises(RuntimeError), transaction.atomic():
        django_ojs.enqueue_many([{"type": "n.tx", "queue": "tx-q"}] * 3)
        raise RuntimeError("rolled back")
    notifier("default").flush(10)
    assert listener.wait(0.3) is False  # a rolled-back push wakes no one


def test_a_scheduled_job_wakes_no_one(listen):
    listener = listen("later-q")
    django_ojs.enqueue("n.later", queue="later-q", scheduled_at=timedelta(hours=1))
    with transaction.atomic():
        django_ojs.enqueue("n.later", queue="later-q", scheduled_at=timedelta(hours=1))
    notifier("default").flush(10)
    assert listener.wait(0.3) is False


def test_the_notifier_coalesces_what_arrives_while_it_sends(listen):
    listener = listen("many-q", "other-q")
    wakes = notifier("default")
    for _ in range(200):
        wakes.wake(("many-q",))
    wakes.wake(("other-q",))
    assert wakes.flush(10) is True
    received = []
    conn = listener._conn
    assert conn is not None
    for note in conn.notifies(timeout=1.0):
        received.append(note.payload)
    assert set(received) == {"many-q", "other-q"}
    assert received.count("many-q") < 200


def test_the_notifier_reconnects_when_its_connection_was_ended(listen):
    listener = listen("again-q")
    wakes = notifier("default")
    wakes.wake(("again-q",))
    assert listener.wait(10) is True
    (pid,) = notifier_backends()
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    wakes.wake(("again-q",))  # its first try fails, the second on a new connection works
    assert listener.wait(10) is True
    assert notifier_backends() != [pid]


def test_an_idle_notifier_gives_its_connection_back(listen, monkeypatch, wait_until):
    monkeypatch.setattr(notifier_module, "IDLE_SECONDS", 0.2)
    listener = listen("idle-q")
    notifier_module.release_all()
    notifier_module._notifiers.clear()  # a new notifier thread, with the short idle time
    notifier("default").wake(("idle-q",))
    assert listener.wait(10) is True
    wait_until(lambda: not notifier_backends(), timeout=30)
    notifier("default").wake(("idle-q",))  # and opens one again when next needed
    assert listener.wait(10) is True


def test_dropping_a_database_first_releases_the_notifier(listen):
    listen("drop-q")
    notifier("default").wake(("drop-q",))
    assert notifier("default").flush(10) is True
    assert notifier_backends()
    # What Django does before it creates or drops a test database.
    with connection._nodb_cursor() as cursor:
        cursor.execute("SELECT 1")
    assert not notifier_backends()


def _push_in_a_child(queue: str) -> None:
    from django.db import connections

    connections.close_all()  # the parent's connections are not the child's
    # The parent forked inside a push: the child's count starts again from none.
    with CaptureQueriesContext(connection) as queries:
        django_ojs.enqueue("n.child", queue=queue)
    assert ["pg_notify" in sql for sql in pushed_sql(queries)] == [True]
    with transaction.atomic():  # the notifier of the child sends it
        django_ojs.enqueue("n.child", queue=queue)
    assert notifier("default").flush(10)


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_has_a_notifier_of_its_own(listen):
    listener = listen("fork-q")
    notifier("default").wake(("fork-q",))  # the parent's notifier runs
    assert listener.wait(10) is True
    child = multiprocessing.get_context("fork").Process(target=_push_in_a_child, args=("fork-q",))
    with pushes.alone():  # forked while a push of the parent is under way
        child.start()
    child.join(60)
    assert child.exitcode == 0
    assert listener.wait(10) is True


def test_a_script_that_pushes_and_exits_still_wakes_the_workers(listen):
    listener = listen("exit-q")
    script = (
        "import django; django.setup()\n"
        "import django_ojs\n"
        "from django.db import transaction\n"
        "with transaction.atomic():\n"
        "    django_ojs.enqueue('n.exit', queue='exit-q')\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.acceptance.settings",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert listener.wait(10) is True


def test_a_lost_wake_up_is_logged_once(listen, monkeypatch, caplog):
    listener = listen("lost-q")
    wakes = notifier("default")
    wakes.wake(("lost-q",))
    assert listener.wait(10) is True
    monkeypatch.setitem(wakes._params, "port", 1)  # nothing listens there
    wakes.release()
    with caplog.at_level(logging.WARNING, logger="django_ojs.worker"):
        wakes.wake(("lost-q",))
        wakes.wake(("lost-q",))
        assert wakes.flush(30) is True
    assert listener.wait(0.3) is False
    unavailable = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(unavailable) == 1
    monkeypatch.undo()  # the outage ends with the next send that works
    wakes.wake(("lost-q",))
    assert listener.wait(10) is True


def test_a_transaction_managed_by_hand_wakes_on_its_commit(listen):
    listener = listen("manual-q")
    transaction.set_autocommit(False)
    try:
        with pushes.alone():  # beside another push: still in its transaction, not after
            django_ojs.enqueue("n.manual", queue="manual-q")
        django_ojs.enqueue_many([{"type": "n.manual", "queue": "manual-q"}] * 2)
        assert listener.wait(0.3) is False  # not before the commit
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert listener.wait(10) is True
