"""Worker pools and scheduling statistics (OJS fair scheduling §10) under ``/admin/``.

``GET /admin/pools`` lists the pools (§10.1), ``PUT /admin/pools/{name}`` creates or
replaces one, ``GET`` and ``DELETE`` read and remove one, ``GET /admin/scheduling/stats``
gives the last minute's dispatches per queue (§10.2). The official OJS admin UI reads
other names for some fields (``pools``, ``workers``, ``dispatched``, a top-level
``strategy``); both are sent, as where clients disagree elsewhere.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import envelope, lifecycle, scheduling
from django_ojs.api.views.admin import AdminView
from django_ojs.api.views.base import refuse_unknown
from django_ojs.exceptions import InvalidRequest
from django_ojs.models import WorkerPool

#: Fields a PUT may send (§6.1, §8.1, §14.2); ``name`` must be the path's. What a GET
#: adds (figures, ids, times) may come back with it and is ignored.
POOL_FIELDS = {
    "name", "queues", "strategy", "weights", "concurrency", "starvation_prevention",
    "isolated", "id", "active_workers", "workers", "active_jobs", "created_at", "updated_at",
}  # fmt: skip


def pool_wire(
    pool: WorkerPool, *, active_workers: int | None = None, active_jobs: int | None = None
) -> dict[str, Any]:
    """A pool as §10.1 lists it, plus the admin UI's ``id`` and ``workers``."""
    starvation = scheduling.Starvation(
        pool.starvation_enabled, pool.rotation_interval, pool.min_dispatch_ratio
    )
    out: dict[str, Any] = {
        "id": pool.name,
        "name": pool.name,
        "queues": list(pool.queues),
        "concurrency": pool.concurrency,
        "strategy": pool.strategy,
    }
    if pool.strategy == scheduling.WEIGHTED:
        out["weights"] = {q: (pool.weights or {}).get(q, 1) for q in pool.queues}
    out["starvation_prevention"] = starvation.to_wire()
    out["isolated"] = pool.isolated
    if active_workers is not None:
        out["active_workers"] = out["workers"] = active_workers
    if active_jobs is not None:
        out["active_jobs"] = active_jobs
    out["created_at"] = envelope.format_timestamp(pool.created_at)
    out["updated_at"] = envelope.format_timestamp(pool.updated_at)
    return out


class PoolsView(AdminView):
    """``GET /admin/pools`` → ``{"items": [...], "pools": [...]}`` (the same list)."""

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        items = [
            pool_wire(s["pool"], active_workers=s["active_workers"], active_jobs=s["active_jobs"])
            for s in lifecycle.pool_summaries()
        ]
        return Response({"items": items, "pools": items})


class PoolView(AdminView):
    """``GET``, ``PUT`` (create or replace: 201 or 200) and ``DELETE`` (204)
    ``/admin/pools/{name}``."""

    def get(self, request: Any, name: str) -> Response:
        self.require_every_queue(request)
        pool = lifecycle.get_pool(name)
        for summary in lifecycle.pool_summaries():
            if summary["pool"].name == pool.name:
                return Response(
                    {
                        "pool": pool_wire(
                            pool,
                            active_workers=summary["active_workers"],
                            active_jobs=summary["active_jobs"],
                        )
                    }
                )
        return Response({"pool": pool_wire(pool)})

    def put(self, request: Any, name: str) -> Response:
        body = self.body(request)
        self.require_every_queue(request)
        refuse_unknown(body, POOL_FIELDS)
        if "name" in body and body["name"] != name:
            raise InvalidRequest(
                "name in the body must be the pool's name in the path", details={"field": "name"}
            )
        if "queues" not in body:
            raise InvalidRequest("queues is required", details={"field": "queues"})
        pool, created = lifecycle.save_pool(
            name,
            body["queues"],
            strategy=body.get("strategy"),
            weights=body.get("weights"),
            concurrency=body.get("concurrency"),
            starvation=body.get("starvation_prevention"),
            isolated=body.get("isolated"),
            actor=self.actor(request),
        )
        return Response({"pool": pool_wire(pool)}, status=201 if created else 200)

    def delete(self, request: Any, name: str) -> Response:
        self.require_every_queue(request)
        lifecycle.delete_pool(name, actor=self.actor(request))
        return Response(status=204)


WINDOW = "PT1M"


class SchedulingStatsView(AdminView):
    """``GET /admin/scheduling/stats`` (§10.2): per queue, the last minute's dispatches,
    their share and average wait, active jobs; plus the admin UI's names (``dispatched``,
    ``weight``, ``starved``, a top-level ``strategy``) and a ``stats`` summary."""

    def get(self, request: Any) -> Response:
        self.require_every_queue(request)
        stats = lifecycle.scheduling_stats()
        queues = []
        for row in stats["queues"]:
            item = dict(row)
            item["dispatched"] = row["dispatch_count_1m"]
            distinct = set(row["weights"].values())
            if len(distinct) == 1:
                item["weight"] = distinct.pop()
            queues.append(item)
        pools: list[WorkerPool] = stats["pools"]
        strategies = {p.strategy for p in pools}
        if not pools:
            strategy = scheduling.STRICT  # workers in no pool: their queues in order
        elif len(strategies) == 1:
            strategy = strategies.pop()
        else:
            strategy = "mixed"
        return Response(
            {
                "queues": queues,
                "window": WINDOW,
                "strategy": strategy,
                "pools": [{"name": p.name, "strategy": p.strategy} for p in pools],
                "stats": {
                    "window": WINDOW,
                    "dispatch_count_1m": stats["dispatch_count_1m"],
                    "queues": len(queues),
                    "pools": len(pools),
                    "starved": [q["name"] for q in queues if q["starved"]],
                    "computed_at": envelope.format_timestamp(stats["computed_at"]),
                },
            }
        )
