"""The admin, the dashboard, the metrics and the admin API's lists on a real standby.

Opt-in with the failover test (``make test-failover``, ``OJS_TEST_FAILOVER=1``): a primary
and a standby streaming from it (``tests/acceptance/clusters.py``); a "web" process whose
``default`` is the primary and whose ``replica`` alias is the standby, with
``OJS_READ_DATABASE = "replica"``, serves the pages through Django's test client to a
staff user. Replay is paused on the standby (``pg_wal_replay_pause()``) while jobs are
pushed to the primary: the pages do not show them yet and say how far behind the replica
is; once replay resumes they show them, 0 s behind. An admin action taken meanwhile acts
on the primary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.acceptance.clusters import Pair, environment, streaming_pair
from tests.acceptance.conftest import ROOT, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.failover,
    pytest.mark.skipif(
        os.environ.get("OJS_TEST_FAILOVER") != "1",
        reason="tests on a private primary and standby are opt-in: make test-failover",
    ),
]

DBNAME = "ojs_replica_reads"

#: Run in the "web" process: GET each page as a staff user, print what the test checks.
PAGES = """
import json, re
from django.contrib.auth.models import User
from django.test import Client

user, _ = User.objects.get_or_create(
    username="ops", defaults={"is_staff": True, "is_superuser": True}
)
client = Client(HTTP_HOST="localhost")
client.force_login(user)
pages = {
    "jobs": "/admin/ojs/job/?type=r.held",
    "dashboard": "/admin/ojs/dashboard/",
    "api": "/ojs/v1/admin/jobs?type=r.held",
    "metrics": "/ojs/metrics",
}
out = {}
for name, url in pages.items():
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    out[name] = response.content.decode()
print("PAGES" + json.dumps(out))
"""


@pytest.fixture
def pair() -> Iterator[Pair]:
    with streaming_pair("ojs-replica-", DBNAME, synchronous=False) as pair:
        yield pair


def web(pair: Pair, code: str) -> str:
    env = {
        **environment(pair.primary.url, settings="tests.acceptance.replica_settings"),
        "REPLICA_DATABASE_URL": pair.standby.url,
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        cwd=ROOT, env=env, check=True, timeout=300, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


def pages(pair: Pair) -> dict[str, Any]:
    out = web(pair, PAGES)
    return json.loads(out[out.index("PAGES") + len("PAGES") :])


def push(pair: Pair, count: int) -> list[str]:
    out = web(
        pair,
        "import django_ojs\n"
        f"for job in django_ojs.enqueue_many([{{'type': 'r.held'}}] * {count}):\n"
        "    print(job.id)\n",
    )
    return out.split()[-count:]


def note(html: str) -> str:
    found = re.search(r'<p class="ojs-muted ojs-replica-note" id="ojs-replica">([^<]*)</p>', html)
    assert found, "the page says nothing about the replica"
    return found.group(1).replace("&#x27;", "'")


def lag_of(text: str) -> float:
    found = re.search(r"a replica ([0-9.]+) s behind the primary", text)
    assert found, text
    return float(found.group(1))


def test_pages_read_the_standby_and_say_how_far_behind_it_is(pair):
    standby = pair.standby
    # A first job, replayed: the standby knows when its last replayed change committed.
    push(pair, 1)
    held = "SELECT count(*) FROM ojs_job WHERE type = 'r.held'"
    wait_for(lambda: standby.query(held)[0] == 1, timeout=60)
    standby.query("SELECT pg_wal_replay_pause()")
    wait_for(lambda: standby.query("SELECT pg_get_wal_replay_pause_state()")[0] == "paused")
    ids = push(pair, 3)
    time.sleep(1.5)  # so that the lag shown is at least a second
    # The primary has them; the standby received them but has not replayed them.
    assert pair.primary.query(held)[0] == 4
    behind = pages(pair)
    for name in ("jobs", "dashboard"):
        assert lag_of(note(behind[name])) >= 1.0, note(behind[name])
    assert not any(job_id in behind["jobs"] for job_id in ids)
    assert len(json.loads(behind["api"])["items"]) == 1
    assert re.search(r'ojs_read_database_lag_seconds\{database="replica"\} ([1-9]|0\.[0-9]*[1-9])',
                     behind["metrics"])  # fmt: skip
    assert 'ojs_jobs{queue="default",state="available"} 1.0' in behind["metrics"]

    standby.query("SELECT pg_wal_replay_resume()")
    wait_for(lambda: standby.query(held)[0] == 4, timeout=60)
    caught_up = pages(pair)
    assert lag_of(note(caught_up["jobs"])) == 0.0
    assert all(job_id in caught_up["jobs"] for job_id in ids)
    assert len(json.loads(caught_up["api"])["items"]) == 4
    assert 'ojs_jobs{queue="default",state="available"} 4.0' in caught_up["metrics"]
    print(f"\nReplica pages: {note(behind['jobs'])!r} while replay was paused")


def test_an_action_on_a_lagging_replica_acts_on_the_primary(pair):
    """Replay paused: the page does not list the new job yet, but cancelling it through
    the admin works: the POST reads and writes the primary."""
    pair.standby.query("SELECT pg_wal_replay_pause()")
    [job_id] = push(pair, 1)
    web(
        pair,
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "user, _ = User.objects.get_or_create(username='ops', "
        "defaults={'is_staff': True, 'is_superuser': True})\n"
        "client = Client(HTTP_HOST='localhost')\n"
        "client.force_login(user)\n"
        "response = client.post('/admin/ojs/job/', {'action': 'cancel_jobs', 'post': 'yes', "
        f"'_selected_action': [{job_id!r}]}})\n"
        "assert response.status_code == 302, response.status_code\n",
    )
    state = pair.primary.query("SELECT state FROM ojs_job WHERE id = %s", [job_id])[0]
    assert state == "cancelled"
    pair.standby.query("SELECT pg_wal_replay_resume()")
