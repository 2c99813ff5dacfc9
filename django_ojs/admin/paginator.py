"""A paginator that never counts a million rows: exact up to a threshold, estimated above.

Django's admin asks its paginator for ``count`` on every list page. On a job table of
millions of rows ``COUNT(*)`` reads them all (oban#1324, good_job#1540). This one counts
at most ``jobquery.EXACT_COUNT_LIMIT + 1`` rows (``SELECT count(*) FROM (... LIMIT n)``, which stops
early); above that it asks PostgreSQL's planner for its row estimate of the same query
(``EXPLAIN``, no rows read). SQLite always counts exactly (it is for small tables).
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.utils.functional import cached_property

from django_ojs import jobquery


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]
    #: True once ``count`` is an estimate (the template says "about").
    estimated = False

    @cached_property
    def count(self) -> int:
        queryset: Any = self.object_list
        if not hasattr(queryset, "query"):
            return super().count
        n, self.estimated = jobquery.count(queryset)
        return n
