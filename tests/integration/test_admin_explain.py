"""Every admin page's queries on the job and event tables can be served by an index.

A small test table would let the planner prefer sequential scans anyway, so each query the
page ran is EXPLAINed again with ``enable_seqscan = off``: the planner then only uses a
sequential scan when no index can serve the query at all. At a million rows such a query
is the page that crawls (issue 14). PostgreSQL only.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_ojs
from django_ojs import lifecycle
from tests.factories import JobFactory, WorkerFactory

pytestmark = [pytest.mark.postgresql]

PAGES = [
    ("admin:index", {}),
    ("admin:ojs_dashboard_changelist", {}),
    ("admin:ojs_job_changelist", {}),
    ("admin:ojs_job_changelist", {"state__exact": "discarded"}),
    ("admin:ojs_job_changelist", {"queue__exact": "mail"}),
    ("admin:ojs_job_changelist", {"type__exact": "email.send"}),
    ("admin:ojs_deadletterjob_changelist", {}),
    ("admin:ojs_worker_changelist", {}),
    ("admin:ojs_queue_changelist", {}),
    ("admin:ojs_tenant_changelist", {}),
    ("admin:ojs_workflow_changelist", {}),
]
#: Tables a page may scan: small by design (one row per queue, worker, key, cron entry).
SMALL = ("ojs_queue", "ojs_worker", "ojs_apikey", "ojs_cronjob", "ojs_ratelimitstate",
         "django_", "auth_")  # fmt: skip


def scanned(sql: str, params: tuple) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    return [
        line.strip()
        for line in plan.splitlines()
        if "Seq Scan on" in line and not any(f"on {t}" in line for t in SMALL)
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "query"), PAGES)
def test_admin_page_queries_use_indexes(admin_client, name, query):
    JobFactory.create_batch(3, queue="mail", type="email.send")
    django_ojs.enqueue("email.send", queue="mail")
    (claimed,) = lifecycle.fetch(["mail"], worker_id="w")
    django_ojs.enqueue("email.send", queue="mail", meta={"tenant_id": "acme"})  # tenants page
    lifecycle.fail(claimed.id, {"message": "no", "retryable": False}, worker_id="w")
    WorkerFactory()
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(reverse(name), query)
    assert response.status_code == 200
    offenders = []
    for q in captured.captured_queries:
        sql = q["sql"]
        if not sql.lstrip().upper().startswith("SELECT") or (
            "ojs_job" not in sql and "ojs_event" not in sql
        ):
            continue
        # The captured SQL has its parameters inlined: EXPLAIN it as it is.
        for scan in scanned(sql, ()):
            offenders.append(f"{scan}\n    in: {sql[:300]}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.django_db(transaction=True)  # CREATE INDEX CONCURRENTLY: no transaction block
def test_args_and_meta_search_uses_the_optional_gin_indexes(admin_client):
    JobFactory.create_batch(3, queue="mail", args=[{"order_id": 7}], meta={"tenant": "acme"})
    out = io.StringIO()
    call_command("ojs_search_index", stdout=out)
    assert out.getvalue().split() == ["ojs_job_args_gin:", "absent", "ojs_job_meta_gin:", "absent"]
    pages = [{"q": 'args:[{"order_id": 7}]'}, {"q": 'meta:{"tenant": "acme"}'}]
    try:
        call_command("ojs_search_index", create=True, stdout=out)
        assert out.getvalue().split()[-4:] == ["ojs_job_args_gin:", "present",
                                               "ojs_job_meta_gin:", "present"]  # fmt: skip
        for query in pages:
            with CaptureQueriesContext(connection) as captured:
                response = admin_client.get(reverse("admin:ojs_job_changelist"), query)
            assert response.status_code == 200 and len(response.context["cl"].result_list) == 3
            searches = [q["sql"] for q in captured.captured_queries if "@>" in q["sql"]]
            assert searches
            for sql in searches:
                with connection.cursor() as cursor:
                    cursor.execute("SET enable_seqscan = off")
                    cursor.execute(f"EXPLAIN {sql}")
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                    cursor.execute("RESET enable_seqscan")
                assert "_gin" in plan, plan
    finally:
        call_command("ojs_search_index", drop=True, stdout=out)
    assert out.getvalue().split()[-4:] == [
        "ojs_job_args_gin:",
        "absent",
        "ojs_job_meta_gin:",
        "absent",
    ]
