"""The back-off and the once-per-outage log lines of ``django_ojs.resilience`` (no database)."""

from __future__ import annotations

import logging

import pytest
from django.db import IntegrityError, OperationalError

from django_ojs import resilience


def test_backoff_doubles_from_the_first_delay_up_to_the_cap_with_jitter():
    top = resilience.Backoff(first=0.1, cap=5.0, rand=lambda: 1.0)
    assert [round(top.next(), 3) for _ in range(8)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    bottom = resilience.Backoff(first=0.1, cap=5.0, rand=lambda: 0.0)
    assert [round(bottom.next(), 3) for _ in range(3)] == [0.05, 0.1, 0.2]
    top.reset()
    assert top.next() == pytest.approx(0.1)


def test_connection_errors_are_djangos_and_psycopgs_operational_and_interface_errors():
    import psycopg

    assert resilience.is_connection_error(OperationalError("server closed the connection"))
    assert resilience.is_connection_error(psycopg.OperationalError("consuming input failed"))
    assert resilience.is_connection_error(psycopg.InterfaceError("the connection is closed"))
    assert not resilience.is_connection_error(IntegrityError("duplicate key"))
    assert not resilience.is_connection_error(ValueError("a bug"))


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(caplog):
    logger = logging.getLogger("django_ojs.test")
    outage = resilience.Outage("fetcher", logger, backoff=resilience.Backoff(rand=lambda: 1.0))
    with caplog.at_level(logging.INFO, logger="django_ojs.test"):
        outage.succeeded()  # no outage: nothing logged
        delays = [outage.failed(OperationalError("gone")) for _ in range(3)]
        assert outage.down
        outage.succeeded()
        outage.succeeded()
    assert delays == pytest.approx([0.1, 0.2, 0.4])
    assert not outage.down
    assert [(r.levelname, r.getMessage().split(" after")[0]) for r in caplog.records] == [
        ("WARNING", "fetcher: database unavailable, retrying (OperationalError: gone)"),
        ("INFO", "fetcher: database available again"),
    ]
    assert "3 failed tries" in caplog.records[1].getMessage()


def test_retry_retries_connection_errors_only_and_gives_up_when_told():
    outage = resilience.Outage("writer", logging.getLogger("django_ojs.test"))
    outage.backoff = resilience.Backoff(first=0.001, cap=0.001)
    results = iter([OperationalError("gone"), OperationalError("gone"), "written"])

    def call() -> str:
        result = next(results)
        if isinstance(result, Exception):
            raise result
        return result

    assert resilience.retry(call, outage) == "written"
    assert not outage.down

    def bug() -> str:
        raise ValueError("not a connection problem")

    with pytest.raises(ValueError):
        resilience.retry(bug, outage)

    def down() -> str:
        raise OperationalError("still gone")

    with pytest.raises(OperationalError):
        resilience.retry(down, outage, give_up_after=0.0)
    assert outage.down
