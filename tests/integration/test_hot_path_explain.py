"""The worker's and the reaper's statements on the job and event tables use indexes.

What keeps pushes, claims, completions and the reaper flat as finished jobs and events
pile up (a million of each in ``bench/drain.py --retained``): none of their statements
may read ``ojs_job`` or ``ojs_event`` sequentially. A small test table lets the planner
prefer sequential scans anyway, so each statement is EXPLAINed again (not run) with
``enable_seqscan = off``: a sequential scan then means no index can serve it at all.
PostgreSQL only; the admin pages have their own test (``test_admin_explain.py``).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.ids import uuid7_at
from django_ojs.models import Event, Job
from tests.factories import JobFactory

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db]

EXPLAINABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
BIG = ("ojs_job", "ojs_event")
PARTIAL_INDEXES = r"""
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
WHERE i.indpred IS NOT NULL AND t.relname ~ '^ojs_(job|event)(_p\d{8}|_default)?$'
"""


class Statements:
    """Every statement run on the connection, with its parameters (the driver binds
    them on the server, so the captured SQL alone has only placeholders)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []
        self.explained = 0

    def __call__(self, execute, sql, params, many, context):
        self.seen.append((sql, params[0] if many and params else params))
        return execute(sql, params, many, context)

    def __enter__(self) -> Statements:
        self._wrap = connection.execute_wrapper(self)
        self._wrap.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._wrap.__exit__(*exc)

    def offenders(self) -> list[str]:
        found = []
        for sql, params in self.seen:
            head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if head not in EXPLAINABLE or not any(t in sql for t in BIG):
                continue
            self.explained += 1
            found += [f"{scan}\n    in: {sql[:400]}" for scan in seq_scans(sql, params)]
        return found


def _big(table: str | None) -> bool:
    """A big table, or one of its partitions (``ojs_job_p20261125``, ``ojs_job_default``)."""
    return table is not None and re.sub(r"_(p\d{8}|default)$", "", table) in BIG


@pytest.fixture(autouse=True, params=["plain", "partitioned"])
def layout(request: pytest.FixtureRequest) -> str:
    """Each test runs on the plain tables and on the optional partitioned layout."""
    if request.param == "partitioned":
        lifecycle.partition_tables(["jobs", "events"], interval="day", premake=2)
    return str(request.param)


def seq_scans(sql: str, params: object) -> list[str]:
    """The plan's full reads of a big table: a sequential scan, or an index walked from
    end to end (no index condition) when the index is not partial. With sequential scans
    off, PostgreSQL falls back to the second when no index can serve the query."""
    # Django's own cursor binds on the client: the same statement with its values.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        (plan,) = cursor.fetchone()
        cursor.execute(PARTIAL_INDEXES)
        partial = {name for (name,) in cursor.fetchall()}
    if isinstance(plan, str):
        plan = json.loads(plan)
    found = []

    def walk(node: dict) -> None:
        kind, table = node["Node Type"], node.get("Relation Name")
        index = node.get("Index Name")
        if _big(table) and kind == "Seq Scan":
            found.append(f"Seq Scan on {table}")
        elif (
            index
            and kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan")
            and "Index Cond" not in node
            and index not in partial
            and (_big(table) or index.startswith(BIG))  # not the catalog's own
        ):
            found.append(f"{kind} using {index}, no condition")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


def test_push_claim_settle_and_beat_use_indexes():
    django_ojs.enqueue("hot.later", [1], scheduled_at=timedelta(hours=1))
    django_ojs.enqueue_many([{"type": "hot.bulk", "args": [i]} for i in range(60)])
    JobFactory.create_batch(3, state="completed", completed_at=timezone.now())
    with Statements() as captured:
        one = django_ojs.enqueue("hot.one", [1], unique={"keys": ["type", "args"]})
        django_ojs.enqueue_many([{"type": "hot.bulk", "args": [i]} for i in range(5)])
        django_ojs.enqueue("hot.limited", [1], rate_limit={"key": "k", "concurrency": 1})
        general = lifecycle.fetch(["default"], 4, worker_id="w-http")
        idle = lifecycle.fetch(["default"], 4, worker_id="w-idle", register=False)
        lifecycle.fetch(["nothing-here"], 4, worker_id="w-idle", register=False)
        lifecycle.beat("w-http", active_job_ids=[j.id for j in general])
        lifecycle.ack(general[0].id, {"ok": True}, worker_id="w-http")
        lifecycle.fail(general[1].id, {"message": "no"}, worker_id="w-http")
        lifecycle.ack_many([(j.id, j.attempt, None) for j in idle[:2]], worker_id="w-idle")
        lifecycle.fail_many(
            [(j.id, j.attempt, {"message": "no"}, False) for j in idle[2:]], worker_id="w-idle"
        )
        lifecycle.cancel(one.id)
    assert len(general) == 4 and len(idle) == 4  # every path above did its work
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained >= 20  # about 40: every path above ran its statements


def test_a_reaper_pass_with_pruning_uses_indexes(settings):
    settings.OJS_RETENTION = {
        "completed": 60, "cancelled": 60, "discarded": 60, "dead_letter": 60, "events": 60,
        "workflows": 60,
    }  # fmt: skip
    long_ago = timezone.now() - timedelta(hours=1)
    JobFactory.create_batch(3, state="completed", completed_at=long_ago)
    JobFactory(state="cancelled", cancelled_at=long_ago)
    JobFactory(state="discarded", discarded_at=long_ago)
    JobFactory(state="scheduled", scheduled_at=long_ago)
    JobFactory(state="retryable", attempt=1, next_attempt_at=long_ago)
    JobFactory(state="available", stale_at=long_ago)
    JobFactory(expired=True)
    with Statements() as captured:
        result = reaper.run_once(prune=True)
    assert result.promoted == 2 and result.pruned["completed"] == 3  # it did the work
    assert Job.objects.filter(state="active").count() == 0
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained >= 10  # about 20: each step and prune kind


def test_a_prune_by_queues_own_retention_uses_indexes(settings):
    """Queue config §6.3: each queue with its own retention is one more statement per
    kind, the queue one more condition on the same index range (or the queues' index)."""
    settings.OJS_RETENTION = {
        "completed": 7 * 86400, "cancelled": 7 * 86400, "discarded": 30 * 86400,
        "dead_letter": 60, "events": 60, "workflows": 60,
    }  # fmt: skip
    lifecycle.set_queue_retention("short", {"completed": "PT60S", "cancelled": "PT60S"})
    lifecycle.set_queue_retention("long", {"completed": "P30D", "discarded": "P90D"})
    long_ago = timezone.now() - timedelta(days=10)
    for queue in ("short", "long", "other"):
        JobFactory.create_batch(2, queue=queue, state="completed", completed_at=long_ago)
        JobFactory(queue=queue, state="cancelled", cancelled_at=long_ago)
        JobFactory(queue=queue, state="discarded", discarded_at=long_ago)
    with Statements() as captured:
        pruned = reaper.prune_expired()
    assert (pruned["completed"], pruned["cancelled"], pruned["discarded"]) == (4, 3, 0)
    assert set(Job.objects.values_list("queue", flat=True)) == {"long", "other", "short"}
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained >= 8


def _job_reads(node: dict) -> set[str]:
    """How a plan reads ``ojs_job`` (or a partition): the index names, or "Seq Scan"."""
    found: set[str] = set()
    table = node.get("Relation Name") or ""
    if _big(table) and table.startswith("ojs_job"):
        if node["Node Type"] == "Seq Scan":
            found.add("Seq Scan")
        elif node.get("Index Name"):
            found.add(node["Index Name"])
    elif node["Node Type"] == "Bitmap Index Scan" and node["Index Name"].startswith("ojs_job"):
        found.add(node["Index Name"])
    for child in node.get("Plans", []):
        found |= _job_reads(child)
    return found


def test_beats_acks_and_fails_read_their_jobs_by_primary_key_even_without_statistics(layout):
    # A new or truncated ojs_job has no column statistics until autovacuum analyses it
    # (a minute or more). Planned blind, a batch ACK or a heartbeat read the jobs through
    # a partial index of active jobs, which keeps an entry for every job claimed since the
    # last vacuum, or rescanned its input once per job: a 30,000-job drain ran 2.4 to 8
    # times slower. Their statements on ojs_job may use its primary key only.
    django_ojs.enqueue_many([{"type": "hot.bulk", "args": [i]} for i in range(40)])
    claimed = lifecycle.fetch(["default"], 20, worker_id="w-blind")
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM pg_statistic WHERE starelid IN "
            "(SELECT oid FROM pg_class WHERE relname ~ '^ojs_job(_p\\d{8}|_default)?$')"
        )
    with Statements() as captured:
        beat = lifecycle.beat("w-blind", active_job_ids=[j.id for j in claimed])
        lifecycle.ack_many([(j.id, j.attempt, None) for j in claimed[:10]], worker_id="w-blind")
        failed = lifecycle.fail_many(
            [(j.id, j.attempt, {"message": "no"}, False) for j in claimed[10:]],
            worker_id="w-blind",
        )
    assert len(beat.jobs_extended) == 20 and len(failed) == 10  # each did its work
    assert Job.objects.filter(state="completed").count() == 10
    # The statements that read several jobs at once. One job read by its key (a
    # compare-and-set) is left out: on a small table the planner may read it through
    # the index of active jobs (seen with 3,000 jobs); with 30,000 it took the key.
    on_jobs = [
        (sql, params)
        for sql, params in captured.seen
        if ('"ojs_job"' in sql or "ojs_job " in sql) and ("IN (" in sql or "ANY(" in sql)
    ]
    assert len(on_jobs) >= 4  # the beat's read and update, the ACK, the FAIL's read
    for sql, params in on_jobs:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")  # a small table, read as a big one
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            (plan,) = cursor.fetchone()
        if isinstance(plan, str):
            plan = json.loads(plan)
        reads = _job_reads(plan[0]["Plan"])
        assert reads, f"the plan reads no job: {sql[:200]}"
        assert all(index.endswith("_pkey") for index in reads), (reads, sql[:200])


def test_an_event_is_found_by_its_id_through_the_time_index():
    """No unique index is kept on event ids: ``after=<event id>`` reads the event's
    millisecond (and, failing that, the few seconds before it) in ojs_event_time_idx."""
    django_ojs.enqueue_many([{"type": "hot.bulk", "args": [i]} for i in range(5)])
    event = Event.objects.order_by("-seq").first()
    with Statements() as captured:
        assert Event.objects.with_id(event.id) == event
        assert Event.objects.with_id(uuid7_at(event.time + timedelta(hours=1))) is None
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained == 3  # one probe that found it, two that did not


def test_tenants_pushes_claims_and_reads_use_indexes(layout):
    """Fair claims (fair scheduling §9): a tenant's push reads its turn in two index
    probes, a claim walks ojs_job_claim_idx in (priority, vtime, id) order, a fetch for
    some tenants ojs_job_tenant_claim_idx, and the admin's tenant reads their indexes."""
    django_ojs.enqueue_many(
        [{"type": "hot.t", "args": [i], "meta": {"tenant_id": f"t{i % 3}"}} for i in range(30)]
    )
    django_ojs.enqueue("hot.later", [1], meta={"tenant_id": "t1"}, scheduled_at=timedelta(hours=1))
    with Statements() as captured:
        django_ojs.enqueue("hot.one", [1], meta={"tenant_id": "t0"})
        django_ojs.enqueue_many(
            [{"type": "hot.t", "args": [i], "meta": {"tenant_id": "t2"}} for i in range(5)]
        )
        claimed = lifecycle.fetch(["default"], 4, worker_id="w-fair")
        scoped = lifecycle.fetch(["default"], 2, worker_id="w-fair", tenants=["t1"])
        lifecycle.promote_due(now=timezone.now() + timedelta(hours=2))
        lifecycle.tenant_ids(limit=10)
        lifecycle.tenant_stats("t0")
        lifecycle.tenant_page(limit=10)  # the tenants page: counts and queue heads
        lifecycle.oldest_available("t1")
    assert len(claimed) == 4 and {j.tenant for j in scoped} == {"t1"}
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained >= 10
    # The claim is an ordered walk of the claim index: no sort of the waiting jobs.
    claims = [(sql, p) for sql, p in captured.seen if "next AS (" in sql and "SKIP LOCKED" in sql]
    assert claims
    for sql, params in claims:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            (plan,) = cursor.fetchone()
        if isinstance(plan, str):
            plan = json.loads(plan)
        sorts = _sorts(plan[0]["Plan"])
        assert not sorts, (sorts, sql[:300])
        # The claim indexes, or their copies on the partitions (named by their columns).
        walked = _job_reads(plan[0]["Plan"]) - {"Seq Scan"}
        ordered = {"ojs_job_claim_idx", "ojs_job_tenant_claim_idx"}
        assert any(r in ordered or "vtime" in r for r in walked), (walked, sql[:300])


def _sorts(node: dict) -> list[str]:
    """The sort keys of the plan's Sort nodes."""
    found = [str(node.get("Sort Key"))] if node["Node Type"] == "Sort" else []
    for child in node.get("Plans", []):
        found += _sorts(child)
    return found


def _filtered(node: dict) -> int:
    """The rows the plan's nodes read and then threw away (``Rows Removed by Filter``)."""
    found = int(node.get("Rows Removed by Filter", 0))
    for child in node.get("Plans", []):
        found += _filtered(child)
    return found


def test_a_small_tenants_turn_is_read_along_its_own_index_beside_a_big_tenant(layout):
    """A push reads its tenant's last turn (lifecycle.fairness): beside a tenant with
    thousands of jobs waiting, a tenant with two must not walk the big one's jobs. With
    ``tenant = k.t`` it did, along ojs_job_claim_idx backwards (69 ms with 50,000
    waiting, statistics taken after the big tenant's import), though not with every set
    of statistics: this test's planner picks the right index for both forms; the
    statement's form (a range of one tenant, ordered by it) leaves it no other choice."""
    from django_ojs.drivers.postgresql.statements import FAIR_BASES_SQL

    django_ojs.enqueue_many([{"type": "hot.t", "meta": {"tenant_id": "big"}}] * 3000)
    with connection.cursor() as cursor:
        # The planner's statistics know only the big tenant (taken after its import).
        cursor.execute("ANALYZE ojs_job")
    django_ojs.enqueue_many([{"type": "hot.t", "meta": {"tenant_id": "small"}}] * 2)
    with connection.cursor() as cursor:
        params = {"queues": ["default"], "tenants": ["small"], "priorities": [0]}
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {FAIR_BASES_SQL}", params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    root = plan[0]["Plan"]
    assert _filtered(root) < 10, json.dumps(plan)[:2000]
    assert any("tenant" in r for r in _job_reads(root)), _job_reads(root)


def _nodes(node: dict, kind: str) -> list[dict]:
    found = [node] if node["Node Type"] == kind else []
    for child in node.get("Plans", []):
        found += _nodes(child, kind)
    return found


def test_a_claim_behind_a_capped_tenants_backlog_reads_a_bounded_window_and_locks_no_row_of_it(
    layout,
):
    """Per-tenant max_concurrency (lifecycle.tenantlimits): with only a capped tenant's
    jobs waiting, a claim reads at most its window of rows along ojs_job_claim_idx, sorts
    nothing and locks none of them (a lock on each row read wrote 1,000 rows per claim)."""
    from django_ojs.drivers.postgresql.statements import CAPPED_CANDIDATES_SQL

    django_ojs.enqueue_many([{"type": "hot.t", "meta": {"tenant_id": "big"}}] * 300)
    window = 100
    params = {
        "queue": "default",
        "now": timezone.now(),
        "limit": 5,
        "window": window,
        "capped": ["big"],
        "caps": [0],  # big is at its cap: none of its jobs may start
    }
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ojs_job")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {CAPPED_CANDIDATES_SQL}", params)
        (plan,) = cursor.fetchone()
    if isinstance(plan, str):
        plan = json.loads(plan)
    root = plan[0]["Plan"]
    assert not _sorts(root), json.dumps(plan)[:2000]
    (locks,) = _nodes(root, "LockRows")
    assert locks["Actual Rows"] == 0
    reads = [
        n
        for kind in ("Index Scan", "Index Only Scan", "Seq Scan")
        for n in _nodes(root, kind)
        if (n.get("Relation Name") or "").startswith("ojs_job")
        and "Index Cond" in n
        and "queue" in str(n.get("Index Cond"))
    ]
    assert reads and sum(n["Actual Rows"] * n["Actual Loops"] for n in reads) <= window + 1


@pytest.mark.parametrize("exact_rows", [50_000, 5])
def test_the_per_tenant_and_scheduling_gauges_use_indexes_or_a_sample(
    layout, monkeypatch, exact_rows
):
    """The scrape's per-tenant gauges (multi-tenancy §11.2) count through indexes; above
    TENANT_EXACT_ROWS they read a TABLESAMPLE (a Sample Scan, not a sequential one)."""
    from django_ojs import metrics

    monkeypatch.setattr(metrics, "TENANT_EXACT_ROWS", exact_rows)
    django_ojs.enqueue_many(
        [{"type": "hot.t", "args": [i], "meta": {"tenant_id": f"t{i % 4}"}} for i in range(40)]
    )
    lifecycle.save_pool("hot-pool", ["default"], concurrency=10)
    lifecycle.PoolFetch("hot-pool", worker_id="w-pool")(3)
    collector = metrics.StoreCollector()
    with Statements() as captured:
        recent = collector.recent_starts("default", timezone.now())
        families = list(collector.tenant_gauges("default", recent))
        families += list(collector.scheduling_gauges("default", recent))
    by_name = {f.name: f for f in families}
    assert sum(s.value for s in by_name["ojs_tenant_jobs_active"].samples) == 3
    estimated = by_name["ojs_tenant_metrics_estimated"].samples[0].value
    assert estimated == (1 if exact_rows == 5 else 0)
    found = captured.offenders()
    assert not found, "\n".join(found)
    assert captured.explained >= 4
