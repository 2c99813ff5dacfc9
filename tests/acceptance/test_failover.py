"""Workers, a reaper, cron and a pushing "web" process across a failover to a standby.

Opt-in (``make test-failover``, or ``OJS_TEST_FAILOVER=1``): it needs the PostgreSQL
server binaries (``initdb``, ``pg_ctl``, ``pg_basebackup``). Two private clusters on free
ports: a primary, and a standby made from it with ``pg_basebackup -R`` streaming from it.
Every process connects with a libpq multi-host URL, ``host=127.0.0.1,127.0.0.1
port=<primary>,<standby> target_session_attrs=read-write``, as behind a failover manager
that promotes a standby: libpq tries the hosts in turn and keeps the one that accepts
writes.

Three ``ojs_worker`` processes (10 threads each, every one running the reaper loop and
cron), one ``ojs_reaper`` and a pusher (``enqueue_many`` in small batches, recording each
batch it was told committed) work through a backlog. The standby streams through a relay
(``Relay``); a third of the way in, the relay holds back what the primary sends for half a
second, as a standby lagging behind a busy primary would be (on one machine the lag is
otherwise about nil), then the primary is stopped hard (``pg_ctl stop -m immediate``), the
link cut (the held WAL is lost) and the standby promoted. Each handler appends
its start to a file (``chaos.mark``, ``chaos.cron_mark``), outside the database, so a job
run twice is seen whatever the surviving server says.

Asserted every run: no job whose completion the surviving server had at the promotion
starts again; every worker is alive and runs a job pushed after the promotion within 30 s
of it (the worker protocol's bound; the figure is printed); the reaper process is alive;
no cron slot has two jobs on the surviving server; every job the surviving server has,
and every job pushed after the promotion, completes; once idle, every worker's listener
finds its connection dead and listens on the new primary (single jobs are then picked up
through NOTIFY: p50 printed).

Four runs: an asynchronous or a synchronous standby (``synchronous_standby_names``), each
with ``OJS_CLAIM_SYNCHRONOUS_COMMIT`` off (the default) and on. What each failover cost is
counted and printed: acknowledged pushes missing, jobs and completions the old primary had
that the standby had not (the old primary's data is started again, on a port nobody's URL
names, to read them), jobs run twice under one attempt number, cron slots run twice. With
a synchronous standby and durable claims nothing may be lost and nothing may run twice
under one attempt number. The figures go to docs/how-to/run-at-scale.md.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.clusters import Cluster, Pair, environment, free_port, streaming_pair
from tests.acceptance.conftest import ROOT, Process, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.failover,
    pytest.mark.skipif(
        os.environ.get("OJS_TEST_FAILOVER") != "1",
        reason="a failover between private clusters is opt-in: make test-failover",
    ),
]

DBNAME = "ojs_failover"
WORKERS = 3
BACKLOG = 2000
#: Each job's handler sleeps this long: the backlog takes seconds, not a blink.
HANDLER_MS = 10
#: The pusher's batches: BATCH jobs, then a PAUSE (seconds).
BATCH = 20
PAUSE = 0.05
#: Worker protocol: a worker is back at work within this many seconds of the promotion.
RESUME_BOUND = 30.0
PICKUP_SAMPLES = 10
#: Seconds the standby receives nothing before the primary stops (see the test).
LAG = 0.5
CRON = {
    "tick": {
        "cron": "@every 1s",
        "type": "chaos.cron_mark",
        "overlap_policy": "allow",
        "queue": "default",
    }
}


@dataclass
class Setup:
    pair: Pair
    #: OJS_CLAIM_SYNCHRONOUS_COMMIT for the workers.
    durable_claims: bool


@pytest.fixture(
    params=[
        pytest.param((False, False), id="standby_async-claims_relaxed"),
        pytest.param((False, True), id="standby_async-claims_durable"),
        pytest.param((True, False), id="standby_sync-claims_relaxed"),
        pytest.param((True, True), id="standby_sync-claims_durable"),
    ]
)
def setup(request) -> Iterator[Setup]:
    synchronous, durable_claims = request.param
    with streaming_pair("ojs-failover-", DBNAME, synchronous=synchronous) as pair:
        yield Setup(pair, durable_claims)


PUSHER = """
import json, os, time
import django_ojs
from django_ojs import resilience

job = {job!r}
with open({pushed!r}, "a") as out:
    first = True
    while not os.path.exists({stop!r}):
        try:
            jobs = django_ojs.enqueue_many([job] * ({backlog} if first else {batch}))
        except resilience.CONNECTION_ERRORS:
            resilience.close_connection("default")  # outcome unknown: not recorded
            time.sleep(0.1)
            continue
        first = False
        out.write(json.dumps({{"at": time.time(), "ids": [str(j.id) for j in jobs]}}) + "\\n")
        out.flush()
        time.sleep({pause})
"""


def pushed(path: Path) -> list[tuple[float, list[str]]]:
    """The batches the pusher was told committed: (when, job ids)."""
    if not path.exists():
        return []
    batches = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(batch["at"], batch["ids"]) for batch in batches]


def starts(path: Path, offset: int = 0) -> list[list[str]]:
    """The starts recorded in ``path`` (one line each, split), from byte ``offset``."""
    if not path.exists():
        return []
    with path.open("rb") as marks:
        marks.seek(offset)
        text = marks.read().decode()
    return [line.split() for line in text.splitlines() if line.endswith(tuple("0123456789"))]


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def settled(standby: Cluster) -> bool:
    """Whether the standby lost its primary and replayed all it will: no WAL receiver
    streaming, and the replay position still for half a second."""
    streaming = "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
    if standby.query(streaming)[0]:
        return False
    before = standby.query("SELECT pg_last_wal_replay_lsn()")[0]
    time.sleep(0.5)
    return bool(standby.query("SELECT pg_last_wal_replay_lsn()")[0] == before)


def old_primary_ids(pair: Pair) -> tuple[set[str], set[str]]:
    """Start the stopped primary's data on a port nobody's URL names, and read what it had
    committed: (its job ids, its completed job ids). Then stop it again."""
    old = pair.primary
    old.start(port=free_port())
    try:
        jobs = {str(row[0]) for row in old.rows("SELECT id FROM ojs_job")}
        done = {str(row[0]) for row in old.rows("SELECT id FROM ojs_job WHERE state = 'completed'")}
    finally:
        old.stop("fast")
    return jobs, done


def pickup(pair: Pair, env: dict[str, str], marks: Path) -> tuple[float, float]:
    """Push single jobs to the idle workers, one every 0.2 s; the p50 and max of their
    waits from push to claim (ms): NOTIFY reaches them, or they poll (1 s)."""
    code = (
        "import time, django_ojs\n"
        f"for _ in range({PICKUP_SAMPLES}):\n"
        f"    print(django_ojs.enqueue('chaos.mark', [{str(marks)!r}]).id)\n"
        "    time.sleep(0.2)\n"
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "shell", "-c", code],
        cwd=ROOT, env=env, check=True, timeout=120, capture_output=True, text=True,
    ).stdout  # fmt: skip
    ids = out.split()[-PICKUP_SAMPLES:]
    wait_for(lambda: len(starts(marks)) == PICKUP_SAMPLES, timeout=60)
    delays = [
        float(row[0])
        for row in pair.standby.rows(
            "SELECT EXTRACT(EPOCH FROM started_at - enqueued_at) * 1000 FROM ojs_job "
            "WHERE id = ANY(%s::uuid[])",
            [ids],
        )
    ]
    assert len(delays) == PICKUP_SAMPLES
    return statistics.median(delays), max(delays)


def test_failover_to_a_standby(setup, tmp_path):
    pair = setup.pair
    marks = tmp_path / "starts.txt"
    cron_marks = tmp_path / "cron.txt"
    pushed_path = tmp_path / "pushed.jsonl"
    stop_path = tmp_path / "stop-pushing"
    timers: dict[str, Any] = {
        "OJS_WORKER_POLL_INTERVAL": 1.0,  # the default: a dead LISTEN would show
        "OJS_WORKER_HEARTBEAT_INTERVAL": 1.0,
        "OJS_CRON": {name: {**entry, "args": [str(cron_marks)]} for name, entry in CRON.items()},
    }
    timers["OJS_CLAIM_SYNCHRONOUS_COMMIT"] = setup.durable_claims
    env = environment(pair.url, **timers)
    workers = [
        Process(["ojs_worker", "--concurrency", "10"], env, tmp_path / f"worker-{i}.log")
        for i in range(WORKERS)
    ]
    reaper = Process(["ojs_reaper"], env, tmp_path / "reaper.log")
    everyone = [*workers, reaper]
    pusher: Process | None = None
    primary, standby = pair.primary, pair.standby
    try:
        wait_for(
            lambda: primary.query("SELECT count(*) FROM ojs_worker")[0] == WORKERS, everyone, 120
        )
        job = {"type": "chaos.mark", "args": [str(marks), HANDLER_MS]}
        code = PUSHER.format(
            job=job, pushed=str(pushed_path), stop=str(stop_path), backlog=BACKLOG,
            batch=BATCH, pause=PAUSE,
        )  # fmt: skip
        pusher = Process(["shell", "-c", code], env, tmp_path / "pusher.log")
        everyone.append(pusher)

        # Mid-drain: a third of the backlog started. What the primary sends is held back
        # from the standby for LAG seconds (a standby lagging behind a busy primary; on one
        # machine the lag is otherwise nil), then the primary stops hard and the link is
        # cut: the held WAL never reaches the standby.
        wait_for(lambda: len(starts(marks)) >= BACKLOG // 3, everyone, timeout=300)
        pair.relay.hold()
        time.sleep(LAG)
        primary.stop("immediate")
        pair.relay.cut()
        stopped = time.monotonic()
        # What the surviving server has, as of the promotion: all it received, replayed.
        wait_for(lambda: settled(standby), everyone, timeout=60)
        survived_done = {
            str(row[0]) for row in standby.rows("SELECT id FROM ojs_job WHERE state = 'completed'")
        }
        survived_ids = {str(row[0]) for row in standby.rows("SELECT id FROM ojs_job")}
        offset = size(marks)
        promoting = time.time()
        standby.promote()
        promoted = time.monotonic()

        # Every worker runs a job pushed after the promotion.
        pids = {str(process.pid) for process in workers}
        resumed: dict[str, float] = {}

        def all_resumed() -> bool:
            new = {i for at, ids in pushed(pushed_path) if at > promoting for i in ids}
            for job_id, _attempt, pid in starts(marks, offset):
                if pid in pids and pid not in resumed and job_id in new:
                    resumed[pid] = time.monotonic() - promoted
            return resumed.keys() == pids

        wait_for(all_resumed, everyone, timeout=RESUME_BOUND)
        first_push = min((at for at, _ in pushed(pushed_path) if at > promoting), default=promoting)

        # New jobs drain: stop pushing, then everything the survivor has completes.
        stop_path.touch()
        assert pusher.wait(120) == 0
        everyone.remove(pusher)
        acknowledged = [i for _, ids in pushed(pushed_path) for i in ids]
        after = {i for at, ids in pushed(pushed_path) if at > promoting for i in ids}
        wait_for(
            lambda: (
                standby.query(
                    "SELECT count(*) FROM ojs_job WHERE state <> 'completed' AND type = 'chaos.mark'"
                )[0]
                == 0
            ),
            everyone,
            timeout=300,
        )
        # Idle now, each worker's listener finds its connection dead and listens again on
        # the new primary; then single jobs are picked up through NOTIFY, not by polling.
        wait_for(
            lambda: all("listener: database available again" in p.output() for p in workers),
            everyone,
            timeout=120,
        )
        p50, worst = pickup(pair, env, tmp_path / "pickup.txt")
        for process in everyone:
            assert process.returncode is None, process.output()[-3000:]
        for process in everyone:
            process.signal(signal.SIGTERM)
        assert [process.wait(60) for process in everyone] == [0] * len(everyone)

        final = {str(row[0]): row[1] for row in standby.rows("SELECT id, state FROM ojs_job")}
        ran = starts(marks)
        ran_after = starts(marks, offset)
        # No job whose completion survived starts again.
        again = [job_id for job_id, _, _ in ran_after if job_id in survived_done]
        assert again == [], f"{len(again)} completed jobs ran again: {again[:5]}"
        # Every job pushed after the promotion is there and completed.
        assert all(final.get(i) == "completed" for i in after)
        # Cron: one job per slot on the surviving server.
        slots = [
            row[0]
            for row in standby.rows(
                "SELECT meta->>'cron_scheduled_at' FROM ojs_job WHERE meta ? 'cron_name'"
            )
        ]
        assert len(slots) == len(set(slots)), "a cron slot fired twice"
        for process in workers:
            log = process.output()
            assert "Traceback" not in log, log[-3000:]
            assert "cannot receive notifications" not in log
            assert "database available again" in log
        assert "database available again" in reaper.output()

        # What the failover cost.
        lost_pushes = [i for i in acknowledged if i not in final]
        per_attempt = Counter((job_id, attempt) for job_id, attempt, _ in ran)
        twice_same_attempt = sum(1 for n in per_attempt.values() if n > 1)
        per_job = Counter(job_id for job_id, _, _ in ran)
        ran_twice = sum(1 for n in per_job.values() if n > 1)
        cron_runs = Counter(line[0] for line in starts(cron_marks))
        cron_twice = sum(1 for n in cron_runs.values() if n > 1)
        old_ids, old_done = old_primary_ids(pair)
        only_old_jobs = len(old_ids - survived_ids)
        only_old_done = len(old_done - survived_done)
        mode = "synchronous" if pair.synchronous else "asynchronous"
        mode += f" standby, OJS_CLAIM_SYNCHRONOUS_COMMIT {'on' if setup.durable_claims else 'off'}"
        print(
            f"\nFailover to a {mode} ({WORKERS} workers, {len(acknowledged)} jobs "
            f"acknowledged to the pusher, {len(per_job)} run): stop to promotion "
            f"{promoted - stopped:.1f}s; workers resumed {min(resumed.values()):.1f}-"
            f"{max(resumed.values()):.1f}s after the promotion (first push after it "
            f"{max(first_push - promoting, 0):.1f}s); lost: {len(lost_pushes)} acknowledged "
            f"pushes, {only_old_jobs} jobs and {only_old_done} completions the old primary "
            f"had; {twice_same_attempt} jobs run twice under one attempt number, "
            f"{ran_twice} run more than once, {cron_twice} cron slots run twice; then "
            f"pickup through LISTEN on the new primary p50 {p50:.1f} ms, max {worst:.1f} ms"
        )
        if pair.synchronous and setup.durable_claims:
            # Every commit a client was told of is on the standby.
            assert lost_pushes == []
            assert twice_same_attempt == 0
            assert cron_twice == 0
    finally:
        if pusher is not None:
            stop_path.touch()
        for process in [*workers, reaper, *([pusher] if pusher else [])]:
            process.stop()
            print(f"--- {process.args[0]} (pid {process.pid}) ---\n{process.output()[-3000:]}")
        print(f"--- standby server log ---\n{standby.log()[-2000:]}")
