"""The plain Django views ``make bench-http`` measures the OJS binding against.

Served by the same gunicorn, with the example project's settings and middleware, in the
same run as the OJS endpoints (``bench/http_settings.py`` routes them):

* ``GET /bench/plain/json``: a small JSON answer, no database;
* ``POST /bench/plain/insert``: parse a JSON object body, INSERT it as one row
  (autocommit, as Django runs a view outside ``atomic``), answer ``201`` with the row's id.

They are what a Django developer would write without any framework on top: the ceiling of
what this server can serve per request, with and without a database write.

Beside them, for diagnosis only, the hot OJS operations served by plain Django views
without DRF (no API key, content negotiation or DRF request and response), each doing what
the OJS view does otherwise: the same parsing and validation, the same lifecycle call, the
same rendering. The difference between an OJS endpoint and its bare twin is what the DRF
layer costs; the difference between the twin and the INSERT view, what the operation does:

* ``POST /bench/bare/jobs``: enqueue one job (``POST /ojs/v1/jobs`` without DRF);
* ``POST /bench/bare/fetch`` and ``POST /bench/bare/ack``: FETCH and ACK.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from django_ojs import lifecycle
from django_ojs.api import serializers
from django_ojs.api.views.jobs import _spec

TABLE = "bench_plain_row"
CREATE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " id bigserial PRIMARY KEY,"
    " created_at timestamptz NOT NULL DEFAULT now(),"
    " data jsonb NOT NULL)"
)


@require_GET
def plain_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok", "service": "bench"})


@csrf_exempt
@require_POST
def plain_insert(request: HttpRequest) -> JsonResponse:
    try:
        body: Any = json.loads(request.body)
    except ValueError:
        return JsonResponse({"error": "invalid JSON"}, status=400)
    if not isinstance(body, dict):
        return JsonResponse({"error": "send a JSON object"}, status=400)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (data) VALUES (%s) RETURNING id, created_at",
            [json.dumps(body)],
        )
        row_id, created_at = cursor.fetchone()
    return JsonResponse({"id": row_id, "created_at": created_at.isoformat()}, status=201)


def _object(request: HttpRequest) -> dict[str, Any]:
    body = json.loads(request.body)
    if not isinstance(body, dict):
        raise ValueError("send a JSON object")
    return body


@csrf_exempt
@require_POST
def bare_enqueue(request: HttpRequest) -> JsonResponse:
    job = lifecycle.push(_spec(_object(request)))
    return JsonResponse({"job": serializers.job(job)}, status=201)


@csrf_exempt
@require_POST
def bare_fetch(request: HttpRequest) -> JsonResponse:
    jobs = [
        serializers.job(j) for j in lifecycle.fetch(**serializers.fetch_request(_object(request)))
    ]
    return JsonResponse({"jobs": jobs, **({"job": jobs[0]} if jobs else {})})


@csrf_exempt
@require_POST
def bare_ack(request: HttpRequest) -> JsonResponse:
    data = serializers.ack_request(_object(request))
    job = lifecycle.ack(
        data["job_id"], data["result"], worker_id=data["worker_id"], fields=serializers.ACK_FIELDS
    )
    return JsonResponse(serializers.ack_result(job))


# After the project's own URLs, as a developer adds views to a project: resolving them
# walks the same patterns an OJS request does.
urlpatterns = [
    path("", include("example_project.urls")),
    path("bench/plain/json", plain_json),
    path("bench/plain/insert", plain_insert),
    path("bench/bare/jobs", bare_enqueue),
    path("bench/bare/fetch", bare_fetch),
    path("bench/bare/ack", bare_ack),
]
