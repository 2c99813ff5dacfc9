"""Worker threads keep their database connection between units of work, unless it broke.

Django's ``close_old_connections`` closes every connection when ``CONN_MAX_AGE`` is 0 (its
default), which in the outcome writer and the reaper meant a new connection before every
batch. ``resilience.drop_broken_connection`` keeps it and still drops a broken or
expired one.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from django_ojs import resilience

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_connection_is_kept_although_conn_max_age_is_zero():
    assert not connection.settings_dict["CONN_MAX_AGE"]
    connection.ensure_connection()
    raw = connection.connection
    for _ in range(3):
        resilience.drop_broken_connection("default")
        assert connection.connection is raw
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone()[0] == 1


@pytest.mark.postgresql
def test_a_broken_connection_is_dropped_and_the_next_query_reconnects():
    connection.ensure_connection()
    raw = connection.connection
    raw.close()  # what a server restart leaves behind
    connection.errors_occurred = True
    resilience.drop_broken_connection("default")
    assert connection.connection is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone()[0] == 1
    assert connection.connection is not raw


def test_a_non_zero_conn_max_age_still_recycles_the_connection():
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = 60
    try:
        connection.ensure_connection()
        raw = connection.connection
        resilience.drop_broken_connection("default")
        assert connection.connection is raw  # not expired yet
        connection.close_at = time.monotonic() - 1
        resilience.drop_broken_connection("default")
        assert connection.connection is None
    finally:
        connection.settings_dict["CONN_MAX_AGE"] = 0
        connection.close()
