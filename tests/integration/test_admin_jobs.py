"""The jobs admin: changelist, filters, search, the read-only detail page and the actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from django_ojs import lifecycle
from django_ojs.models import Event, Job
from tests.factories import JobFactory, WorkerFactory
from tests.integration.admin_support import ask, confirm, messages_of, operator

pytestmark = pytest.mark.django_db

LIST = reverse("admin:ojs_job_changelist")


def change_url(job: Job) -> str:
    return reverse("admin:ojs_job_change", args=[job.pk])


def listed(response) -> set:
    return {job.pk for job in response.context["cl"].result_list}


# -- changelist --------------------------------------------------------------------------------


def test_changelist__shows_columns_with_coloured_state(admin_client):
    job = JobFactory(discarded=True, type="email.send", queue="mail", max_attempts=3, priority=5)

    response = admin_client.get(LIST)

    assert response.status_code == 200
    html = response.content.decode()
    assert str(job.pk) in html
    assert '<span class="ojs-state ojs-state-discarded">discarded</span>' in html
    assert "3 / 3" in html
    assert "handler_error" in html  # last error type
    assert "email.send" in html and "mail" in html


@pytest.mark.parametrize("state", ["scheduled", "available", "active", "retryable", "completed"])
def test_changelist__filters_by_state(admin_client, state):
    wanted = JobFactory(**{state: True}) if state != "available" else JobFactory()
    other = JobFactory(cancelled=True)

    response = admin_client.get(LIST, {"state__exact": state})

    assert listed(response) == {wanted.pk}
    assert other.pk not in listed(response)


def test_changelist__filters_by_queue_and_type(admin_client):
    mail = JobFactory(queue="mail", type="email.send")
    JobFactory(queue="reports", type="report.build")
    JobFactory(queue="mail", type="email.digest")

    assert listed(admin_client.get(LIST, {"queue": "mail", "type": "email.send"})) == {mail.pk}
    assert len(listed(admin_client.get(LIST, {"queue": "mail"}))) == 2


def test_changelist__filters_by_created_date(admin_client):
    recent = JobFactory()
    JobFactory(created_at=timezone.now() - timedelta(days=30))
    # The "Past 7 days" link of Django's date filter: aware midnights.
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    week = {
        "created_at__gte": str(today - timedelta(days=7)),
        "created_at__lt": str(today + timedelta(days=1)),
    }

    response = admin_client.get(LIST, week)

    assert listed(response) == {recent.pk}


def test_changelist__filters_by_finished_time(admin_client):
    finished_now = JobFactory(completed=True)
    cancelled_now = JobFactory(cancelled=True)
    JobFactory(completed=True, completed_at=timezone.now() - timedelta(days=3))
    running = JobFactory(active=True)

    assert listed(admin_client.get(LIST, {"finished": "1h"})) == {finished_now.pk, cancelled_now.pk}
    assert len(listed(admin_client.get(LIST, {"finished": "7d"}))) == 3
    assert listed(admin_client.get(LIST, {"finished": "no"})) == {running.pk}


def test_changelist__filters_by_worker(admin_client):
    held = JobFactory(active=True, worker_id="worker-a")
    JobFactory(active=True, worker_id="worker-b")

    response = admin_client.get(LIST, {"worker_id": "worker-a", "state__exact": "active"})

    assert listed(response) == {held.pk}


def test_search__by_full_id(admin_client):
    job = JobFactory()
    JobFactory()

    assert listed(admin_client.get(LIST, {"q": str(job.pk)})) == {job.pk}


def test_search__by_type(admin_client):
    job = JobFactory(type="invoice.render")
    JobFactory(type="email.send")

    assert listed(admin_client.get(LIST, {"q": "invoice"})) == {job.pk}


def test_search__by_args_meta_type_prefix_and_error(admin_client):
    wanted = JobFactory(type="email.send", args=[{"order_id": 42, "lang": "en"}],
                        meta={"tenant": "acme"})  # fmt: skip
    other = JobFactory(type="email.digest", args=[{"order_id": 7}])
    sms = JobFactory(type="sms.send", args=[{"order_id": 42}],
                     error={"type": "SMTPError", "message": "no"})  # fmt: skip

    def found(term: str) -> set:
        response = admin_client.get(LIST, {"q": term})
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert found('args:[{"order_id": 42}]') == {wanted.pk, sms.pk}
    assert found('type:email.* args:[{"order_id": 42}]') == {wanted.pk}
    assert found('meta:{"tenant": "acme"}') == {wanted.pk}
    assert found("type:email.*") == {wanted.pk, other.pk}
    assert found("error:SMTPError") == {sms.pk}
    response = admin_client.get(LIST, {"q": "args:{not json"})
    assert "Search: args must be JSON" in response.content.decode()
    assert list(response.context["cl"].result_list) == []


def test_changelist__links_to_the_dashboard(admin_client):
    response = admin_client.get(LIST)

    assert response.context["ojs_dashboard_url"] == reverse("admin:ojs_dashboard_changelist")
    assert f'<li><a href="{response.context["ojs_dashboard_url"]}">Dashboard</a></li>' in (
        response.content.decode()
    )


# -- detail page -------------------------------------------------------------------------------


def _failed_job():
    """A job that really went through enqueue, fetch and a failure with a backtrace."""
    job = lifecycle.enqueue("report.build", [{"id": 7}], queue="reports", meta={"trace_id": "t-1"})
    lifecycle.fetch(["reports"], worker_id="worker-7")
    lifecycle.fail(
        job.pk,
        {
            "type": "ValueError",
            "message": "bad report <id>",
            "backtrace": ["File handlers.py, line 3", "ValueError: bad report"],
        },
        worker_id="worker-7",
    )
    return Job.objects.get(pk=job.pk)


def test_detail__shows_payload_errors_events_and_worker(admin_client):
    WorkerFactory(id="worker-7")
    job = _failed_job()

    response = admin_client.get(change_url(job))

    assert response.status_code == 200
    html = response.content.decode()
    assert '<pre class="ojs-json">[\n  {\n    &quot;id&quot;: 7\n  }\n]</pre>' in html  # args
    assert "&quot;trace_id&quot;: &quot;t-1&quot;" in html  # meta
    assert "ValueError" in html and "bad report &lt;id&gt;" in html  # escaped message
    assert "File handlers.py, line 3" in html  # backtrace
    for kind in ("job.enqueued", "job.started", "job.failed", "job.retrying"):
        assert kind in html
    assert reverse("admin:ojs_worker_change", args=["worker-7"]) in html


def test_detail__names_a_worker_that_is_gone(admin_client):
    job = JobFactory(active=True, worker_id="ghost")

    html = admin_client.get(change_url(job)).content.decode()

    assert "ghost <em>(no longer registered)</em>" in html


def test_detail__says_when_events_are_not_stored(admin_client, settings):
    settings.OJS_STORE_EVENTS = False
    job = JobFactory(completed=True, result={"ok": True})

    html = admin_client.get(change_url(job)).content.decode()

    assert "OJS_STORE_EVENTS = False" in html
    assert "&quot;ok&quot;: true" in html


def test_detail__is_read_only(admin_client):
    job = JobFactory(type="email.send")

    response = admin_client.get(change_url(job))
    posted = admin_client.post(change_url(job), {"type": "hacked", "state": "completed"})

    assert 'name="_save"' not in response.content.decode()
    assert posted.status_code == 403
    job.refresh_from_db()
    assert (job.type, job.state) == ("email.send", "available")


def test_jobs_cannot_be_added_or_deleted(admin_client):
    job = JobFactory()

    assert admin_client.get(reverse("admin:ojs_job_add")).status_code == 403
    assert (
        admin_client.post(
            reverse("admin:ojs_job_delete", args=[job.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert "delete_selected" not in admin_client.get(LIST).content.decode()
    assert Job.objects.filter(pk=job.pk).exists()


@pytest.mark.parametrize(
    ("trait", "buttons"),
    [
        ("discarded", {"retry_jobs", "purge_jobs"}),
        ("completed", {"purge_jobs"}),
        ("active", {"cancel_jobs", "discard_jobs"}),
        ("scheduled", {"cancel_jobs", "discard_jobs", "run_jobs_now"}),
        ("retryable", {"cancel_jobs", "discard_jobs", "run_jobs_now"}),
    ],
)
def test_detail__offers_the_actions_that_apply(admin_client, trait, buttons):
    job = JobFactory(**{trait: True})

    response = admin_client.get(change_url(job))

    offered = {name for name, _, _ in response.context["ojs_actions"]}
    assert offered == buttons


def test_detail__button_leads_to_the_confirmation(admin_client):
    job = JobFactory(discarded=True)

    response = ask(admin_client, LIST, "retry_jobs", [job.pk])

    assert response.status_code == 200
    assert response.templates[0].name == "admin/ojs/confirm_action.html"
    job.refresh_from_db()
    assert job.state == "discarded"  # nothing happens before the confirmation


# -- actions -----------------------------------------------------------------------------------


def test_retry__asks_then_retries_and_reports_per_job(admin_client):
    dead = [JobFactory(discarded=True) for _ in range(3)]
    done = JobFactory(completed=True)
    keys = [j.pk for j in [*dead, done]]

    page = ask(admin_client, LIST, "retry_jobs", keys)
    html = page.content.decode()
    assert "Retry these dead-lettered jobs?" in html
    assert "will be skipped: already completed" in html
    assert "Yes, retry 4 jobs" in html

    response = confirm(admin_client, LIST, "retry_jobs", keys)

    assert messages_of(response) == [f"3 retried; 1 skipped: already completed ({done.pk})"]
    assert set(Job.objects.filter(pk__in=[j.pk for j in dead]).values_list("state", flat=True)) == {
        "available"
    }
    done.refresh_from_db()
    assert done.state == "completed"


def test_retry__of_a_completed_job_is_refused(admin_client):
    done = JobFactory(completed=True)

    response = confirm(admin_client, LIST, "retry_jobs", [done.pk])

    assert messages_of(response) == [f"0 retried; 1 skipped: already completed ({done.pk})"]
    (level,) = [m.tags for m in response.context["messages"]]
    assert level == "error"
    done.refresh_from_db()
    assert done.state == "completed"


def test_cancel__cancels_unfinished_jobs_and_skips_finished_ones(admin_client):
    waiting = JobFactory()
    running = JobFactory(active=True)
    already = JobFactory(cancelled=True)
    done = JobFactory(completed=True)

    response = confirm(
        admin_client, LIST, "cancel_jobs", [waiting.pk, running.pk, already.pk, done.pk]
    )

    (message,) = messages_of(response)
    assert message.startswith("2 cancelled; ")
    assert f"1 skipped: already cancelled ({already.pk})" in message
    assert f"1 skipped: already completed ({done.pk})" in message
    assert Job.objects.get(pk=waiting.pk).state == "cancelled"
    assert Job.objects.get(pk=running.pk).state == "cancelled"
    event = Event.objects.get(job_id=running.pk, type="job.cancelled")
    assert event.data["cancelled_by"] == "admin:admin"


def test_discard__moves_jobs_to_the_dead_letter(admin_client):
    job = JobFactory(retryable=True)
    done = JobFactory(completed=True)

    response = confirm(admin_client, LIST, "discard_jobs", [job.pk, done.pk])

    assert messages_of(response) == [f"1 discarded; 1 skipped: already completed ({done.pk})"]
    job.refresh_from_db()
    assert job.state == "discarded"
    assert job.error["message"] == "Discarded from the admin"


def test_run_now__makes_scheduled_and_retryable_jobs_available(admin_client):
    scheduled = JobFactory(scheduled=True)
    retryable = JobFactory(retryable=True)
    running = JobFactory(active=True)

    response = confirm(admin_client, LIST, "run_jobs_now", [scheduled.pk, retryable.pk, running.pk])

    assert messages_of(response) == [
        f"2 made available; 1 skipped: currently active ({running.pk})"
    ]
    assert Job.objects.get(pk=scheduled.pk).state == "available"
    assert Job.objects.get(pk=retryable.pk).state == "available"
    assert Job.objects.get(pk=running.pk).state == "active"


def test_purge__deletes_finished_jobs_only(admin_client):
    done = JobFactory(completed=True)
    cancelled = JobFactory(cancelled=True)
    waiting = JobFactory()

    response = confirm(admin_client, LIST, "purge_jobs", [done.pk, cancelled.pk, waiting.pk])

    assert messages_of(response) == [f"2 purged; 1 skipped: currently available ({waiting.pk})"]
    assert list(Job.objects.values_list("pk", flat=True)) == [waiting.pk]


def test_action__on_a_job_that_left_the_filtered_list_is_reported(admin_client):
    job = JobFactory(discarded=True)
    lifecycle.retry_discarded(job.pk)  # someone else retried it after the page was shown

    response = admin_client.post(
        f"{LIST}?state__exact=discarded",
        {"action": "purge_jobs", "post": "yes", "_selected_action": [str(job.pk)]},
        follow=True,
    )

    assert messages_of(response) == [f"0 purged; 1 skipped: no longer in this list ({job.pk})"]
    assert Job.objects.filter(pk=job.pk).exists()


# -- permissions -------------------------------------------------------------------------------


def test_permissions__viewer_sees_jobs_but_no_actions():
    client = operator("ojs.view_job")
    job = JobFactory(discarded=True)

    response = client.get(LIST)

    assert response.status_code == 200
    assert response.context["action_form"] is None
    assert client.get(change_url(job)).context["ojs_actions"] == []


def test_permissions__retry_allowed_but_not_purge():
    client = operator("ojs.view_job", "ojs.retry_job")
    job = JobFactory(discarded=True)

    choices = {name for name, _ in client.get(LIST).context["action_form"].fields["action"].choices}
    assert "retry_jobs" in choices
    assert "purge_jobs" not in choices and "cancel_jobs" not in choices

    refused = confirm(client, LIST, "purge_jobs", [job.pk])
    assert messages_of(refused) == ["No action selected."]
    assert Job.objects.get(pk=job.pk).state == "discarded"

    allowed = confirm(client, LIST, "retry_jobs", [job.pk])
    assert messages_of(allowed) == ["1 retried"]
    assert Job.objects.get(pk=job.pk).state == "available"


@pytest.mark.parametrize(
    ("perm", "action", "trait"),
    [
        ("ojs.cancel_job", "cancel_jobs", "active"),
        ("ojs.discard_job", "discard_jobs", "retryable"),
        ("ojs.run_job_now", "run_jobs_now", "scheduled"),
        ("ojs.purge_job", "purge_jobs", "completed"),
    ],
)
def test_permissions__each_action_needs_its_permission(perm, action, trait):
    job = JobFactory(**{trait: True})
    without = operator("ojs.view_job", username="viewer")
    with_perm = operator("ojs.view_job", perm, username="allowed")

    # A viewer has no actions at all: the changelist ignores the POST and changes nothing.
    refused = confirm(without, LIST, action, [job.pk])
    assert refused.status_code == 200 and messages_of(refused) == []
    assert Job.objects.get(pk=job.pk).state == job.state

    (message,) = messages_of(confirm(with_perm, LIST, action, [job.pk]))
    assert message.startswith("1 ")


def test_permissions__anonymous_users_are_sent_to_login(client):
    response = client.get(LIST)

    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_job_list_counts_exactly_below_the_limit_and_estimates_above(admin_client, monkeypatch):
    from django.db import connection

    from django_ojs import jobquery

    monkeypatch.setattr(jobquery, "EXACT_COUNT_LIMIT", 5)
    JobFactory.create_batch(4)
    response = admin_client.get(LIST)
    assert response.context["cl"].paginator.count == 4
    assert response.context["cl"].paginator.estimated is False
    JobFactory.create_batch(8)
    response = admin_client.get(LIST)
    counted = response.context["cl"].paginator
    if connection.vendor == "postgresql":
        assert counted.estimated is True and counted.count >= 6  # the planner's figure
    else:
        assert (counted.estimated, counted.count) == (False, 12)


# -- every job matching a filter ---------------------------------------------------------------


def _across(client, url: str, action: str, key: object, **extra: object):
    data = {"action": action, "select_across": "1", "_selected_action": [str(key)], **extra}
    return client.post(url, data)


def test_action_across__confirms_with_the_count_and_runs_in_batches_to_the_end(
    admin_client, monkeypatch
):
    monkeypatch.setattr("django_ojs.admin.jobs.ACROSS_BATCH", 2)
    dead = [JobFactory(discarded=True) for _ in range(5)]
    done = JobFactory(completed=True)
    url = f"{LIST}?state__exact=discarded"

    page = _across(admin_client, url, "retry_jobs", dead[0].pk, index="0")
    text = page.content.decode()
    assert "all 5 jobs matching the current filter" in text
    assert "Yes, retry all 5 matching jobs" in text

    progress = _across(admin_client, url, "retry_jobs", dead[0].pk, post="yes", ojs_total="5")
    assert progress.templates[0].name == "admin/ojs/bulk_progress.html"
    assert Job.objects.filter(state="discarded").count() == 5  # nothing runs before a batch
    state = progress.context["state"]

    seen = []
    for _ in range(10):
        step = _across(admin_client, url, "retry_jobs", dead[0].pk, post="yes",
                       ojs_state=state, ojs_format="json").json()  # fmt: skip
        seen.append(step["processed"])
        state = step["state"]
        if step["finished"]:
            break

    assert seen == [2, 4, 5]
    assert step["message"] == "5 retried"
    assert set(Job.objects.filter(pk__in=[j.pk for j in dead]).values_list("state", flat=True)) == {
        "available"
    }
    assert Job.objects.get(pk=done.pk).state == "completed"
    assert messages_of(admin_client.get(url, follow=True)) == ["5 retried"]


def test_action_across__a_stopped_run_resumes_after_the_last_job_acted_on(
    admin_client, monkeypatch
):
    monkeypatch.setattr("django_ojs.admin.jobs.ACROSS_BATCH", 3)
    jobs = sorted((JobFactory(discarded=True) for _ in range(4)), key=lambda j: j.pk)
    waiting = JobFactory()  # matches the filter but cannot be purged: reported as skipped
    url = f"{LIST}?type={jobs[0].type}"
    assert waiting.type == jobs[0].type
    start = _across(admin_client, url, "purge_jobs", jobs[0].pk, post="yes", ojs_total="5")

    first = _across(
        admin_client, url, "purge_jobs", jobs[0].pk, post="yes", ojs_state=start.context["state"]
    )  # fmt: skip  (no JavaScript: a page)
    assert first.context["run"].processed == 3 and not first.context["run"].finished
    # The operator stops here; later the page's Continue posts the same state back.
    second = _across(admin_client, url, "purge_jobs", jobs[0].pk, post="yes",
                     ojs_state=first.context["state"])  # fmt: skip

    run = second.context["run"]
    assert run.finished and run.done == 4
    assert run.message("purged") == f"4 purged; 1 skipped: currently available ({waiting.pk})"
    assert list(Job.objects.values_list("pk", flat=True)) == [waiting.pk]


def test_action_across__a_forged_state_is_a_400_and_changes_nothing(admin_client):
    job = JobFactory(discarded=True)

    for state in (
        "not json",
        "[]",
        '{"total": "x", "done": 0}',
        '{"total": 1, "done": 0, "after": "zz"}',
    ):
        response = _across(admin_client, LIST, "retry_jobs", job.pk, post="yes", ojs_state=state)
        assert response.status_code == 400

    assert Job.objects.get(pk=job.pk).state == "discarded"


def test_action_across__needs_the_action_permission():
    client = operator("ojs.view_job", "ojs.purge_job")  # may purge, may not retry
    job = JobFactory(discarded=True)

    response = client.post(LIST, {
        "action": "retry_jobs", "select_across": "1", "_selected_action": [str(job.pk)],
        "post": "yes", "ojs_state": '{"total": 1, "done": 0}', "ojs_format": "json",
    }, follow=True)  # fmt: skip

    assert response["Content-Type"].startswith("text/html")  # the list, not a batch's outcome
    assert messages_of(response) == ["No action selected."]
    assert Job.objects.get(pk=job.pk).state == "discarded"


@pytest.mark.sqlite
def test_search_index_command__sqlite_has_none_and_says_why():
    with pytest.raises(CommandError, match="on SQLite, args/meta search checks each row"):
        call_command("ojs_search_index", create=True)
