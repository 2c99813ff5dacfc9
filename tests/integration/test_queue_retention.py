"""A queue's own retention of its finished jobs (queue config §6.3, §11.1).

Set through ``lifecycle`` (validated, audited, one event), read by the reaper: a queue
with a shorter retention loses its finished jobs sooner, one with a longer keeps them
longer, the other queues follow ``OJS_RETENTION``. Over HTTP in ISO 8601 durations, with
GET → PUT → GET the identity (what the official admin UI does). On both databases.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import django_ojs
from django_ojs import lifecycle, reaper
from django_ojs.actors import Actor
from django_ojs.exceptions import ValidationError
from django_ojs.models import AuditEntry, Event, Job, Queue
from tests.factories import JobFactory
from tests.integration.api_support import assert_ojs_error, client

pytestmark = pytest.mark.django_db

DAY = 86400


def ago(days: float):
    return timezone.now() - timedelta(days=days)


def left(*jobs: Job) -> set[str]:
    """Which of ``jobs`` are still stored, by queue."""
    present = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", flat=True))
    return {f"{j.queue}@{j.pk in present}" for j in jobs}


# ---------------------------------------------------------------------- setting it


def test_set_queue_retention_stores_seconds_and_none_removes_it():
    queue = lifecycle.set_queue_retention(
        "reports", {"completed": "P14D", "discarded": 3600, "cancelled": None}
    )
    assert queue.retention == {"completed": 14 * DAY, "discarded": 3600}
    assert Queue.objects.get(name="reports").retention == queue.retention
    assert lifecycle.queue_retention() == {"reports": {"completed": 14 * DAY, "discarded": 3600}}
    lifecycle.set_queue_retention("reports", {"completed": "PT0.5S"})
    assert lifecycle.queue_retention() == {"reports": {"completed": 0.5}}
    for gone in (None, {}, {"completed": None}):
        lifecycle.set_queue_retention("reports", {"completed": "P1D"})
        assert lifecycle.set_queue_retention("reports", gone).retention is None
    assert lifecycle.queue_retention() == {}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"completed": "14 days"}, "retention.completed"),
        ({"completed": "P"}, "retention.completed"),
        ({"discarded": -1}, "retention.discarded"),
        ({"cancelled": True}, "retention.cancelled"),
        ({"completed": "P200Y"}, "retention.completed"),
        ({"events": "P1D"}, "retention.events"),
        ({"dead_letter": "P1D"}, "retention.dead_letter"),
        ("P7D", "retention"),
        ([], "retention"),
    ],
)
def test_bad_retention_is_refused_naming_the_field_and_changes_nothing(bad, field):
    lifecycle.set_queue_retention("reports", {"completed": "P1D"})
    with pytest.raises(ValidationError) as info:
        lifecycle.set_queue_retention("reports", bad)
    assert info.value.field == field
    assert lifecycle.queue_retention() == {"reports": {"completed": DAY}}


def test_each_change_is_audited_and_emits_one_event():
    actor = Actor("svc:ops", source="python")
    lifecycle.set_queue_retention("reports", {"completed": "P2D"}, actor=actor)
    lifecycle.set_queue_retention("reports", None, actor=actor)
    details = list(
        AuditEntry.objects.filter(action="queue.retention")
        .order_by("id")
        .values_list("queue", "detail")
    )
    assert details == [("reports", {"retention": {"completed": 2 * DAY}}), ("reports", {})]
    events = Event.objects.filter(type="queue.retention_changed").order_by("seq")
    assert [e.data.get("retention") for e in events] == [{"completed": 2 * DAY}, None]


def test_configure_queue_sets_limits_and_retention_together_or_not_at_all():
    lifecycle.configure_queue("reports", limits={"concurrency": 2}, retention={"completed": "P1D"})
    queue = Queue.objects.get(name="reports")
    assert (queue.limits, queue.retention) == ({"concurrency": 2}, {"completed": DAY})
    with pytest.raises(ValidationError):
        lifecycle.configure_queue("reports", limits={"concurrency": 5}, retention={"x": 1})
    queue.refresh_from_db()
    assert (queue.limits, queue.retention) == ({"concurrency": 2}, {"completed": DAY})
    lifecycle.set_queue_limits("reports", None)  # the retention stays
    assert Queue.objects.get(name="reports").retention == {"completed": DAY}


# ---------------------------------------------------------------------- pruning by it


def test_the_reaper_prunes_each_queue_by_its_own_retention(settings):
    settings.OJS_RETENTION = {"completed": 7 * DAY, "cancelled": 7 * DAY, "discarded": 30 * DAY}
    lifecycle.set_queue_retention("short", {"completed": "P1D", "cancelled": "PT12H"})
    lifecycle.set_queue_retention("long", {"completed": "P30D", "discarded": "P90D"})
    jobs = {
        # Two days old: only the short queue's go.
        "completed 2d": [JobFactory(queue=q, completed=True, completed_at=ago(2))
                         for q in ("short", "long", "other")],
        # Ten days old: past the global 7 days, inside the long queue's 30.
        "completed 10d": [JobFactory(queue=q, completed=True, completed_at=ago(10))
                          for q in ("short", "long", "other")],
        "cancelled 1d": [JobFactory(queue=q, cancelled=True, cancelled_at=ago(1))
                         for q in ("short", "long", "other")],
        # Forty days old: past the global 30 days, inside the long queue's 90.
        "discarded 40d": [JobFactory(queue=q, discarded=True, discarded_at=ago(40))
                          for q in ("short", "long", "other")],
    }  # fmt: skip
    out = reaper.prune_expired()
    assert left(*jobs["completed 2d"]) == {"short@False", "long@True", "other@True"}
    assert left(*jobs["completed 10d"]) == {"short@False", "long@True", "other@False"}
    assert left(*jobs["cancelled 1d"]) == {"short@False", "long@True", "other@True"}
    assert left(*jobs["discarded 40d"]) == {"short@False", "long@True", "other@False"}
    assert (out["completed"], out["cancelled"], out["discarded"]) == (3, 1, 2)
    # The long queue's jobs go once they pass its own retention.
    Job.objects.filter(queue="long", state="completed").update(completed_at=ago(31))
    assert reaper.prune_expired()["completed"] == 2


def test_a_queue_retention_leaves_the_dead_letter_and_events_to_the_global_one(settings):
    settings.OJS_RETENTION = {"dead_letter": 180 * DAY, "discarded": 30 * DAY}
    lifecycle.set_queue_retention("short", {"discarded": "P1D"})
    dead = JobFactory(queue="short", discarded=True, dead_letter=True, discarded_at=ago(2))
    plain = JobFactory(queue="short", discarded=True, discarded_at=ago(2))
    reaper.prune_expired()
    assert left(dead, plain) == {"short@True", "short@False"}
    assert Job.objects.filter(pk=dead.pk).exists()


def test_with_a_global_retention_of_none_only_the_queue_with_its_own_prunes(settings):
    settings.OJS_RETENTION = {"completed": None}
    lifecycle.set_queue_retention("short", {"completed": "P1D"})
    short = JobFactory(queue="short", completed=True, completed_at=ago(400))
    other = JobFactory(queue="other", completed=True, completed_at=ago(400))
    assert reaper.prune_expired()["completed"] == 1
    assert left(short, other) == {"short@False", "other@True"}


def test_prune_shares_its_limit_between_the_queues_oldest_ids_first():
    lifecycle.set_queue_retention("short", {"completed": "P1D"})
    jobs = [JobFactory(queue=q, completed=True, completed_at=ago(10))
            for q in ("other", "short", "other", "short")]  # fmt: skip
    cutoffs = reaper.queue_cutoffs(timezone.now())
    first = lifecycle.prune(completed_before=ago(7), queues=cutoffs, limit=3)
    assert first["completed"] == 3
    rest = lifecycle.prune(completed_before=ago(7), queues=cutoffs, limit=3)
    assert rest["completed"] == 1 and not Job.objects.filter(pk__in=[j.pk for j in jobs]).exists()


def test_the_result_ttl_still_keeps_a_job_of_a_queue_with_a_shorter_retention():
    lifecycle.set_queue_retention("short", {"completed": "PT1H"})
    kept = JobFactory(
        queue="short", completed=True, completed_at=ago(1), result_ttl=timedelta(days=3)
    )
    gone = JobFactory(queue="short", completed=True, completed_at=ago(1))
    reaper.prune_expired()
    assert Job.objects.filter(pk=kept.pk).exists() and not Job.objects.filter(pk=gone.pk).exists()


# ---------------------------------------------------------------------- over HTTP

CONFIG = "/queues/reports/config"
ADMIN = "/admin/queues/reports"
DEFAULTS = {"completed": "P7D", "discarded": "P30D", "cancelled": "P7D"}
ALL_DEFAULT = {"completed": "default", "discarded": "default", "cancelled": "default"}


def put(api, path: str, body) -> dict:
    response = api.request("PUT", path, body)
    assert response.status_code == 200, response.body
    return response.body


def test_get_shows_the_global_retention_as_iso_durations_saying_so():
    django_ojs.enqueue("x", [], queue="reports")
    api = client("admin")
    config = api.get(CONFIG).body["config"]
    assert config == {"limits": None, "retention": DEFAULTS, "retention_source": ALL_DEFAULT}
    detail = api.get(ADMIN).body["configuration"]
    assert detail == {"retention": DEFAULTS, "retention_source": ALL_DEFAULT}


def test_put_sets_the_retention_and_get_shows_it():
    api = client("admin")
    body = {"retention": {"completed": "P14D", "discarded": "P90D", "cancelled": "PT36H"}}
    answer = put(api, f"{ADMIN}/config", body)
    expected = {"completed": "P14D", "discarded": "P90D", "cancelled": "P1DT12H"}
    assert answer["config"]["retention"] == expected
    assert api.get(ADMIN).body["configuration"]["retention"] == expected
    assert api.get(ADMIN).body["configuration"]["retention_source"] == {
        "completed": "queue", "discarded": "queue", "cancelled": "queue",
    }  # fmt: skip
    assert lifecycle.queue_retention()["reports"] == {
        "completed": 14 * DAY, "discarded": 90 * DAY, "cancelled": 36 * 3600,
    }  # fmt: skip


@pytest.mark.parametrize("path", [CONFIG, f"{ADMIN}/config"])
def test_get_put_get_is_the_identity(path):
    api = client("admin")
    django_ojs.enqueue("x", [], queue="reports")
    read = (lambda: api.get(CONFIG).body) if path == CONFIG else (lambda: api.get(ADMIN).body)
    part = "config" if path == CONFIG else "configuration"
    for setup in (
        {},  # every default
        {"concurrency": 3, "retention": {"completed": "P1D"}},
        {"retention": {"completed": "P7D", "discarded": "P1D"}},  # P7D: the default, kept so
    ):
        put(api, path, setup)
        before = read()
        put(api, path, before[part])  # the configuration alone
        assert read()[part] == before[part]
        put(api, path, before)  # and the whole answer it came in
        assert read()[part] == before[part]
    stored = Queue.objects.get(name="reports").retention
    # The defaults GET filled in (cancelled) were not stored.
    assert stored == {"completed": 7 * DAY, "discarded": DAY}


def test_the_official_admin_ui_saves_what_it_read():
    """QueueConfigModal sends concurrency and the completed/discarded retention back."""
    api = client("admin")
    django_ojs.enqueue("x", [], queue="reports")
    read = api.get(ADMIN).body["configuration"]
    body = {
        "concurrency": 4,
        "retention": {k: read["retention"][k] for k in ("completed", "discarded")},
    }
    put(api, f"{ADMIN}/config", body)
    after = api.get(ADMIN).body["configuration"]
    assert after == {**read, "concurrency": 4}
    body["retention"]["completed"] = "P2D"
    put(api, f"{ADMIN}/config", body)
    assert api.get(ADMIN).body["configuration"]["retention"]["completed"] == "P2D"
    assert lifecycle.queue_retention() == {"reports": {"completed": 2 * DAY}}


def test_seconds_are_accepted_and_null_removes_the_override():
    api = client("admin")
    put(api, CONFIG, {"retention": {"completed": 3600, "discarded": 0}})
    config = api.get(CONFIG).body["config"]
    assert config["retention"] == {"completed": "PT1H", "discarded": "PT0S", "cancelled": "P7D"}
    put(api, CONFIG, {"retention": None})
    assert api.get(CONFIG).body["config"]["retention_source"] == ALL_DEFAULT
    assert lifecycle.queue_retention() == {}


def test_a_global_retention_of_none_reads_null_and_round_trips(settings):
    settings.OJS_RETENTION = {"completed": None}
    api = client("admin")
    put(api, CONFIG, {})
    config = api.get(CONFIG).body["config"]
    assert config["retention"]["completed"] is None
    put(api, CONFIG, config)
    assert api.get(CONFIG).body["config"] == config and lifecycle.queue_retention() == {}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retention": {"completed": "seven days"}}, "retention.completed"),
        ({"retention": {"discarded": -5}}, "retention.discarded"),
        ({"retention": {"events": "P1D"}}, "retention.events"),
        ({"retention": "P7D"}, "retention"),
        ({"max_size": 10}, "max_size"),
        ({"rate_limit": {"limit": 10, "period": "1m"}}, "rate_limit"),
        ({"concurrency": 2, "limits": {"concurrency": 3}}, "concurrency"),
        ({"concurrency": "x"}, "concurrency"),
        ({"limits": {"concurrency": -1}}, "limits.concurrency"),
    ],
)
def test_bad_config_is_400_naming_the_field_and_changes_nothing(body, field):
    api = client("admin")
    put(api, CONFIG, {"concurrency": 1, "retention": {"completed": "P1D"}})
    error = assert_ojs_error(api.request("PUT", CONFIG, body), 400, "invalid_payload")
    assert error["details"]["field"] == field
    queue = Queue.objects.get(name="reports")
    assert (queue.limits, queue.retention) == ({"concurrency": 1}, {"completed": DAY})


def test_changing_the_config_needs_the_admin_scope():
    assert_ojs_error(client("operator").request("PUT", CONFIG, {"retention": None}), 403)
    assert client("operator").get(CONFIG).status_code in (200, 403, 404)
