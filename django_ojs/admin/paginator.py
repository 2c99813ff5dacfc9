"""A paginator that never counts a million rows: exact up to a threshold, estimated above.

Django's admin asks its paginator for ``count`` on every list page. On a job table of
millions of rows ``COUNT(*)`` reads them all (oban#1324, good_job#1540). This one counts
at most ``EXACT_LIMIT + 1`` rows (``SELECT count(*) FROM (... LIMIT n)``, which stops
early); above that it asks PostgreSQL's planner for its row estimate of the same query
(``EXPLAIN``, no rows read). SQLite always counts exactly (it is for small tables).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.paginator import Paginator
from django.db import connections
from django.utils.functional import cached_property

#: Up to this many rows the count is exact.
EXACT_LIMIT = 10_000


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    #: True once ``count`` is an estimate (the template says "about").
    estimated = False

    @cached_property
    def count(self) -> int:
        queryset: Any = self.object_list
        if not hasattr(queryset, "query") or connections[queryset.db].vendor != "postgresql":
            return super().count
        bounded = queryset.order_by()[: EXACT_LIMIT + 1]
        exact: int = bounded.count()
        if exact <= EXACT_LIMIT:
            return exact
        estimate = planner_estimate(queryset)
        self.estimated = True
        return max(estimate, exact)


def planner_estimate(queryset: Any) -> int:
    """PostgreSQL's estimate of how many rows ``queryset`` returns (``EXPLAIN``)."""
    sql, params = queryset.order_by().query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
