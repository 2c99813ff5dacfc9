"""Per-tenant metrics (OJS multi-tenancy §11.2, MT-006; cardinality §15.4): families of
their own with a ``tenant_id`` label, counting jobs with a tenant only."""

from __future__ import annotations

import pytest
from django.db import connection

import django_ojs
from django_ojs import checks, lifecycle, metrics
from django_ojs.conf import settings as ojs_settings
from tests.integration.api_support import client
from tests.integration.test_observability import BOTH, run, scrape

pytestmark = pytest.mark.django_db(transaction=True)


def labelled(family: dict, **labels) -> float | None:
    return family.get(tuple(sorted(labels.items())))


def test_store_gauges_per_tenant_and_queue(settings):
    for tenant, n in (("acme", 3), ("globex", 1)):
        for _ in range(n):
            django_ojs.enqueue("t.work", queue="tq", meta={"tenant_id": tenant})
    django_ojs.enqueue("t.work", queue="tq")  # no tenant: in no ojs_tenant_* series
    got = lifecycle.fetch(["tq"], worker_id="w", count=1, tenants=["acme"])
    assert len(got) == 1
    now = scrape(client("admin"))
    assert labelled(now["ojs_tenant_jobs_active"], tenant_id="acme", queue="tq") == 1
    assert labelled(now["ojs_tenant_queue_depth"], tenant_id="acme", queue="tq") == 2
    assert labelled(now["ojs_tenant_queue_depth"], tenant_id="globex", queue="tq") == 1
    assert now["ojs_tenant_metrics_estimated"][()] == 0
    # The one dispatch of the last minute was acme's (job.started events are stored).
    assert now["ojs_tenant_fairness_share"] == {(("tenant_id", "acme"),): 1.0}
    # The families that were there keep their labels: no tenant_id on them.
    assert all("tenant_id" not in dict(k) for k in now["ojs_jobs"])
    assert now["ojs_jobs"][(("queue", "tq"), ("state", "available"))] == 4


def test_a_site_without_tenants_gets_empty_tenant_families(settings):
    django_ojs.enqueue("t.work", queue="plain")
    lifecycle.fetch(["plain"], worker_id="w")
    now = scrape(client("admin"))
    for name in ("ojs_tenant_jobs_active", "ojs_tenant_queue_depth", "ojs_tenant_fairness_share"):
        assert not now.get(name), name


def test_gauges_name_the_largest_tenants_and_sum_the_rest(settings):
    settings.OJS_METRICS_MAX_TENANTS = 2
    for tenant, n in (("big", 3), ("mid", 2), ("small", 1), ("tiny", 1)):
        django_ojs.enqueue_many(
            [{"type": "t.work", "queue": "cq", "meta": {"tenant_id": tenant}}] * n
        )
    depth = scrape(client("admin"))["ojs_tenant_queue_depth"]
    assert {dict(k)["tenant_id"]: v for k, v in depth.items()} == {
        "big": 3, "mid": 2, "_other": 2,
    }  # fmt: skip


def test_top_tenants__ties_by_name_and_zero_keeps_none():
    rows = [("b", "q", 1), ("a", "q", 1), ("c", "q2", 5)]
    assert metrics.top_tenants(rows, 2) == {("c", "q2"): 5, ("a", "q"): 1, ("_other", "q"): 1}
    assert metrics.top_tenants(rows, 0) == {("_other", "q"): 2, ("_other", "q2"): 5}


def test_counters_per_tenant_from_the_middleware(settings):
    settings.OJS_ENQUEUE_MIDDLEWARE = BOTH
    settings.OJS_EXECUTION_MIDDLEWARE = BOTH
    api = client("admin")
    key = (("queue", "kq"), ("tenant_id", "initech"))
    before = scrape(api)

    def value(now: dict, name: str) -> float:
        return now.get(name, {}).get(key, 0)

    for _ in range(2):
        django_ojs.enqueue("t.work", queue="kq", meta={"tenant_id": "initech"})
    django_ojs.enqueue("t.work", queue="kq")
    jobs = lifecycle.fetch(["kq"], worker_id="w", count=3)
    mine = [j for j in jobs if j.tenant]
    assert len(mine) == 2
    assert not run(mine[0], lambda: 1 / 0).ok
    assert run(mine[1], lambda: "ok").ok
    assert run(next(j for j in jobs if not j.tenant), lambda: "ok").ok
    now = scrape(api)
    for name, more in (
        ("ojs_tenant_jobs_enqueued_total", 2),
        ("ojs_tenant_jobs_failed_total", 1),
        ("ojs_tenant_jobs_processed_total", 1),
    ):
        assert value(now, name) == value(before, name) + more, name
        assert all(dict(k).get("tenant_id") for k in now[name])


def test_counter_tenant_labels_are_bounded(settings):
    settings.OJS_METRICS_MAX_TENANTS = 0
    assert metrics.process().tenant_label("never-seen-before") == "_other"


@pytest.mark.parametrize("name", ["OJS_METRICS_MAX_TYPES", "OJS_METRICS_MAX_TENANTS"])
@pytest.mark.parametrize("bad", [-1, "10", 1.5, True])
def test_check__metric_limits_are_non_negative_integers(settings, name, bad):
    setattr(settings, name, bad)
    assert [m.id for m in checks.check_settings()] == ["ojs.E019"]
    setattr(settings, name, 0)
    assert checks.check_settings() == []


def test_depth_is_estimated_above_the_exact_limit(settings, monkeypatch):
    """Above TENANT_EXACT_ROWS available jobs of tenants the depth is read from a sample
    (PostgreSQL; SQLite counts them all); below, exactly."""
    django_ojs.enqueue_many(
        [{"type": "t.work", "queue": "eq", "meta": {"tenant_id": f"t{i % 3}"}} for i in range(30)]
    )
    using = ojs_settings.DATABASE
    collector = metrics.StoreCollector()
    families = {f.name: f for f in collector.tenant_gauges(using, [])}
    assert families["ojs_tenant_metrics_estimated"].samples[0].value == 0
    assert sum(s.value for s in families["ojs_tenant_queue_depth"].samples) == 30
    monkeypatch.setattr(metrics, "TENANT_EXACT_ROWS", 10)
    families = {f.name: f for f in collector.tenant_gauges(using, [])}
    estimated = families["ojs_tenant_metrics_estimated"].samples[0].value
    assert estimated == (1 if connection.vendor == "postgresql" else 0)
    for sample in families["ojs_tenant_queue_depth"].samples:
        assert sample.value >= 0
