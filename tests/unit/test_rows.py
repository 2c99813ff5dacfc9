"""The unsaved job rows a push builds (``lifecycle.rows``), without the database."""

from __future__ import annotations

import copy
import pickle
import uuid
from datetime import timedelta

from django.db.models.signals import post_init
from django.utils import timezone
from uuid6 import uuid7

from django_ojs.lifecycle import rows
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


def test_new_ids__increasing_distinct_uuid7s_that_sort_before_later_ones():
    before = uuid7()
    ids = rows.new_ids(1000)
    after = uuid7()
    assert ids == sorted(ids) and len(set(ids)) == 1000
    assert {i.version for i in ids} == {7} and {i.variant for i in ids} == {uuid.RFC_4122}
    assert before < ids[0] and ids[-1] < after


def test_new_ids__none_and_one():
    assert rows.new_ids(0) == []
    (one,) = rows.new_ids(1)
    assert one.version == 7


def test_new_ids__never_count_into_the_variant_bits(monkeypatch):
    # A first id whose random bits are one short of their maximum: counting 10 up from it
    # would carry into the variant; another first id is drawn.
    near_end = uuid.UUID(int=(uuid7().int | rows._RAND_B) - 1)
    draws = iter([near_end, uuid7()])
    monkeypatch.setattr(rows, "uuid7", lambda: next(draws))
    ids = rows.new_ids(10)
    assert near_end not in ids and ids == sorted(ids)
    assert {i.variant for i in ids} == {uuid.RFC_4122} and {i.version for i in ids} == {7}


def test_job_rows__give_the_jobs_without_an_id_increasing_ids_and_keep_given_ones():
    given = uuid7()
    specs = [spec(), spec(id=str(given)), spec(), spec()]
    jobs = job_rows(specs, timezone.now(), 3)
    assert jobs[1].id == given
    made = [jobs[0].id, jobs[2].id, jobs[3].id]
    assert made == sorted(made) and len(set(made)) == 3 and given not in made


def test_new_ids__are_the_uuids_their_ints_make():
    ids = rows.new_ids(3)
    for made in ids:
        same = uuid.UUID(int=made.int)
        assert (made, hash(made), str(made), made.version) == (same, hash(same), str(same), 7)
        assert (made.is_safe, type(made)) == (same.is_safe, uuid.UUID)
        assert copy.deepcopy(made) == pickle.loads(pickle.dumps(made)) == made
