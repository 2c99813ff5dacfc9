"""The unsaved job rows a push builds (``lifecycle.rows``), without the database."""

from __future__ import annotations

from datetime import timedelta

from django.db.models.signals import post_init
from django.utils import timezone
from uuid6 import uuid7

from django_ojs.lifecycle.rows import build_spec, job_row, job_rows
from django_ojs.models import Job


def spec(**options: object):  # type: ignore[no-untyped-def]
    return build_spec("rows.check", [1, {"a": "b"}], dict(options))


def columns(job: Job) -> dict[str, object]:
    return {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}


def test_a_row_is_what_the_model_constructor_builds() -> None:
    now = timezone.now()
    row = job_row(
        spec(queue="mail", priority=5, meta={"k": 1}, scheduled_at=timedelta(hours=1), timeout=3),
        now,
        3,
    )
    same = Job(**columns(row))
    assert columns(row) == columns(same)
    assert row.state == "scheduled" and row.queue == "mail" and row.timeout_ms == 3000
    assert row._state.adding is True and row._state.db is None
    assert row.pk == row.id and row.workflow_id is None
    assert vars(row).keys() == vars(same).keys()


def test_init_signal_receivers_still_hear_of_each_row() -> None:
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        row = job_row(spec(), timezone.now(), 3)
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [row]
    assert seen[0].type == "rows.check"


def test_job_rows__give_the_jobs_without_an_id_increasing_ids_and_keep_given_ones():
    given = uuid7()
    specs = [spec(), spec(id=str(given)), spec(), spec()]
    jobs = job_rows(specs, timezone.now(), 3)
    assert jobs[1].id == given
    made = [jobs[0].id, jobs[2].id, jobs[3].id]
    assert made == sorted(made) and len(set(made)) == 3 and given not in made
