"""Driver listeners: SQLite polls, PostgreSQL wakes on commit (run on both in CI)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

import django_ojs
from django_ojs.drivers import get_driver


@pytest.mark.sqlite
def test_listener__sqlite_polls_and_can_be_woken():
    listener = get_driver("default").listener(["default"])
    start = time.monotonic()
    assert listener.wait(0.05) is False
    threading.Timer(0.05, listener.wake).start()
    assert listener.wait(5) is False
    assert time.monotonic() - start < 2
    listener.close()


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
def test_listener__postgresql_wakes_on_commit_not_on_rollback():
    listener = get_driver("default").listener(["wake-q"])
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            django_ojs.enqueue("a", queue="wake-q")
            raise RuntimeError("rollback")
        assert listener.wait(0.3) is False  # a rolled-back push never wakes anyone
        start = time.monotonic()
        django_ojs.enqueue("a", queue="wake-q")
        assert listener.wait(5) is True
        assert time.monotonic() - start < 1
        django_ojs.enqueue("a", queue="other-q")
        assert listener.wait(0.3) is False  # not one of our queues
        threading.Timer(0.05, listener.wake).start()
        assert listener.wait(5) is False
    finally:
        listener.close()
        connection.close()
