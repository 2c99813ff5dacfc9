"""The dashboard: linked from the admin index, counts by state per queue, SVG charts."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from django_ojs import lifecycle, queues
from django_ojs.admin import charts, dashboard
from tests.factories import JobFactory, WorkerFactory
from tests.integration.admin_support import operator

pytestmark = pytest.mark.django_db

URL = reverse("admin:ojs_dashboard_changelist")


def _run(queue: str, *, fail: bool = False) -> None:
    """A job through the real lifecycle: enqueue, fetch, then ack or fail."""
    job = lifecycle.enqueue("test.echo", [1], queue=queue)
    lifecycle.fetch([queue], worker_id="w-1")
    if fail:
        lifecycle.fail(job.pk, {"type": "Boom", "message": "boom"}, worker_id="w-1")
    else:
        lifecycle.ack(job.pk, {"ok": True}, worker_id="w-1")


def test_dashboard__is_linked_from_the_admin_index(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()

    assert f'href="{URL}"' in html and "Dashboard" in html


def test_dashboard__counts_by_state_per_queue(admin_client):
    JobFactory(queue="mail")
    JobFactory(queue="mail", active=True)
    JobFactory(queue="reports", discarded=True)
    queues.pause("reports")

    response = admin_client.get(URL)

    assert response.status_code == 200
    table = response.context["table"]
    rows = {row["name"]: dict(zip(table["states"], (c for c, _ in row["cells"]), strict=True))
            for row in table["rows"]}  # fmt: skip
    assert rows["mail"]["available"] == 1 and rows["mail"]["active"] == 1
    assert rows["reports"]["discarded"] == 1
    assert table["total"] == 3
    html = response.content.decode()
    assert '<span class="ojs-flag-paused">paused</span>' in html
    assert "queue=mail&amp;state__exact=active" in html


def test_dashboard__charts_count_completed_failed_retried_per_minute(admin_client):
    _run("mail")
    _run("mail")
    _run("reports", fail=True)  # failed once, will be retried

    response = admin_client.get(URL)

    context = response.context
    assert context["from_events"] is True
    assert context["totals"] == {"completed": 2, "failed": 1, "retried": 1}
    assert context["series"]["completed"][-1] == 2  # all in the current minute
    assert len(context["minutes"]) == dashboard.WINDOW_MINUTES
    assert dict(context["throughput"]) == {
        "mail": {"completed": 2, "failed": 0},
        "reports": {"completed": 0, "failed": 1},
    }
    html = response.content.decode()
    assert '<svg class="ojs-chart" id="ojs-per-minute-chart"' in html
    assert '<polyline class="ojs-series-completed" points="' in html
    assert '<svg class="ojs-chart" id="ojs-throughput-chart"' in html
    assert "<script" not in html.split('id="content-main"')[1]  # server-rendered, no JS


def test_dashboard__without_stored_events_falls_back_to_job_times(admin_client, settings):
    settings.OJS_STORE_EVENTS = False
    JobFactory(completed=True, queue="mail")
    JobFactory(discarded=True, queue="mail")
    JobFactory(completed=True, completed_at=timezone.now() - timedelta(hours=3))  # too old

    response = admin_client.get(URL)

    assert response.context["from_events"] is False
    assert response.context["totals"] == {"completed": 1, "failed": 1, "retried": 0}
    assert "OJS_STORE_EVENTS = False" in response.content.decode()


def test_dashboard__attention_cards(admin_client, settings):
    settings.OJS_WORKER_STALE_AFTER = 60
    JobFactory(discarded=True)
    JobFactory(expired=True)
    JobFactory(enqueued_at=timezone.now() - timedelta(minutes=10))
    WorkerFactory(id="gone", last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    WorkerFactory(id="alive")

    cards = {c.label: c for c in admin_client.get(URL).context["cards"]}

    assert cards["dead letter"].value == 1 and cards["dead letter"].alert
    assert cards["past their reservation"].value == 1
    assert cards["workers (stale)"].value == "2 (1)" and cards["workers (stale)"].alert
    assert cards["oldest waiting"].value.startswith("10m") and cards["oldest waiting"].alert


def test_dashboard__empty_database(admin_client):
    response = admin_client.get(URL)

    assert response.status_code == 200
    assert response.context["totals"] == {"completed": 0, "failed": 0, "retried": 0}
    assert "No job finished in the last 60 minutes." in response.content.decode()


def test_dashboard__needs_view_job_permission():
    assert operator(username="nobody").get(URL).status_code == 403
    assert operator("ojs.view_job", username="viewer").get(URL).status_code == 200


def test_dashboard__has_no_object_pages(admin_client):
    job = JobFactory()

    assert admin_client.get(f"{URL}{job.pk}/change/").status_code == 404
    assert admin_client.get(f"{URL}add/").status_code == 404


def test_charts__nice_ceiling():
    assert [charts.nice_ceiling(v) for v in (0, 1, 3, 7, 11, 240, 5001)] == [
        1,
        1,
        5,
        10,
        20,
        500,
        10000,
    ]


def test_charts__line_geometry():
    chart = charts.line_chart(["a", "b", "c"], {"completed": [0, 5, 10]}, width=160, height=134)

    # Plot area: x 44..132, y 10..110; the top is 10, so 10 maps to y=10 and 0 to y=110.
    assert chart.lines[0].points == "44.0,110.0 88.0,60.0 132.0,10.0"
    assert chart.lines[0].total == 15
    assert chart.y_ticks == [(110.0, 0), (60.0, 5), (10.0, 10)]


@pytest.mark.parametrize(
    ("peak", "ticks"),
    [
        (0, [0, 1]),
        (4, [0, 1, 2, 3, 4]),
        (5, [0, 2, 4, 6]),
        (7, [0, 2, 4, 6, 8]),
        (130, [0, 50, 100, 150]),
    ],
)
def test_charts__gridlines_are_whole_numbers(peak, ticks):
    chart = charts.line_chart(["a", "b"], {"completed": [0, peak]})

    assert [value for _, value in chart.y_ticks] == ticks


def test_charts__bar_geometry():
    chart = charts.bar_chart([("mail", {"completed": 3, "failed": 1}), ("x", {"completed": 1, "failed": 0})],
                             width=300, label_width=100)  # fmt: skip

    mail = chart.bars[0]
    assert chart.top_value == 5
    assert [(s.x, s.width) for s in mail.segments] == [(100.0, 84.0), (184.0, 28.0)]
    assert mail.total == 4 and mail.end_x == 212.0 and mail.middle_y == mail.y + 9
    assert chart.bars[1].y > mail.y


def _done(queue: str, wait_ms: int, run_ms: int, *, ago: timedelta = timedelta(minutes=5)) -> None:
    completed = timezone.now() - ago
    started = completed - timedelta(milliseconds=run_ms)
    JobFactory(completed=True, queue=queue, started_at=started, completed_at=completed,
               enqueued_at=started - timedelta(milliseconds=wait_ms))  # fmt: skip


def test_dashboard__wait_and_run_time_percentiles_per_queue(admin_client):
    for i in range(1, 101):  # waits 10..1000 ms, runs 1..100 ms
        _done("mail", wait_ms=10 * i, run_ms=i)
    _done("reports", wait_ms=5, run_ms=2_000)
    _done("mail", wait_ms=99_999, run_ms=99_999, ago=timedelta(hours=2))  # out of the window
    JobFactory(discarded=True, queue="mail")  # not completed: not counted

    response = admin_client.get(URL)

    timing = response.context["timings"]
    assert timing.jobs == 101 and not timing.sampled
    wait = dict(timing.wait)
    assert [wait["mail"][p] for p in ("p50", "p95", "p99", "n")] == [500, 950, 990, 100]
    assert wait["reports"]["p99"] == 5
    run = dict(timing.run)
    assert [run["mail"][p] for p in ("p50", "p99")] == [50, 99]
    assert run["reports"]["p50"] == 2_000
    assert [queue for queue, _ in timing.wait] == ["mail", "reports"]  # busiest first
    html = response.content.decode()
    assert '<svg class="ojs-chart" id="ojs-wait-chart"' in html
    assert '<rect class="ojs-series-p50"' in html
    assert '<svg class="ojs-chart" id="ojs-run-chart"' in html


def test_dashboard__timings_read_a_bounded_sample(admin_client, monkeypatch):
    monkeypatch.setattr(dashboard, "TIMING_SAMPLE", 3)
    for i in range(5):
        _done("mail", wait_ms=100, run_ms=10, ago=timedelta(minutes=i + 1))

    timing = admin_client.get(URL).context["timings"]

    assert timing.jobs == 3 and timing.sampled
    assert "Read from the newest 3 completions" in admin_client.get(URL).content.decode()


def test_dashboard__refreshes_in_place_from_a_fragment(admin_client, settings):
    settings.OJS_ADMIN_REFRESH_SECONDS = 7
    JobFactory(queue="mail")

    page = admin_client.get(URL).content.decode()
    fragment = admin_client.get(URL, {"live": "1"}).content.decode()

    assert 'id="ojs-live" data-mode="fragment" data-url="?live=1" data-seconds="7"' in page
    assert "ojs/live.js" in page and "Refresh every 7 seconds" in page
    assert "<html" not in fragment and "<script" not in fragment
    assert 'id="ojs-state-table"' in fragment and 'id="ojs-live-time"' in fragment
    # The same markup the page holds, but for the time it was rendered (the two requests
    # may fall in different seconds).
    as_of = re.compile(r'<span id="ojs-live-time">[^<]*</span>')
    assert as_of.sub("", fragment.strip()) in as_of.sub("", page)

    settings.OJS_ADMIN_REFRESH_SECONDS = 0
    assert "ojs/live.js" not in admin_client.get(URL).content.decode()


def test_job_list__refreshes_its_rows_in_place(admin_client, settings):
    settings.OJS_ADMIN_REFRESH_SECONDS = 5
    jobs_url = reverse("admin:ojs_job_changelist")

    html = admin_client.get(jobs_url).content.decode()

    assert 'id="ojs-live" data-mode="list" data-seconds="5"' in html and "ojs/live.js" in html
    settings.OJS_ADMIN_REFRESH_SECONDS = 0
    assert "ojs/live.js" not in admin_client.get(jobs_url).content.decode()


def test_charts__percentile_geometry():
    chart = charts.percentile_chart(
        [("mail", {"p50": 10, "p95": 40, "p99": 50, "n": 9}), ("x", {"p50": 1, "p95": 1, "p99": 1})],
        width=300, label_width=100,
    )  # fmt: skip

    mail = chart.bars[0]
    assert chart.top_value == 50  # the largest p99, not the count
    assert [(s.name, s.x, s.width) for s in mail.segments] == [
        ("p99", 100.0, 120.0), ("p95", 100.0, 96.0), ("p50", 100.0, 24.0)
    ]  # fmt: skip
    assert mail.total == 50 and mail.end_x == 220.0
