"""``models.loaded_jobs`` and ``models.unsaved_job`` build jobs as ``Job.from_db`` and
``Job(...)`` do, without ``__init__``'s loop over the fields."""

from __future__ import annotations

import pytest
from django.db import models
from django.db.models.signals import post_init

import django_ojs
from django_ojs.models import Job, loaded_jobs, unsaved_job
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

FIELDS = ["id", "type", "queue", "args", "state", "attempt", "started_at"]


def loaded(job: Job) -> list[object]:
    return [getattr(job, name) for name in FIELDS]


def test_a_loaded_job_is_what_from_db_builds():
    saved = JobFactory(active=True, args=[1, {"a": "b"}])
    (fast,) = loaded_jobs("default", FIELDS, [loaded(saved)])
    slow = Job.from_db("default", FIELDS, loaded(saved))
    assert vars(fast).keys() == vars(slow).keys()
    assert {k: v for k, v in vars(fast).items() if k != "_state"} == {
        k: v for k, v in vars(slow).items() if k != "_state"
    }
    assert (fast._state.adding, fast._state.db) == (False, "default")
    assert fast.get_deferred_fields() == slow.get_deferred_fields()
    assert "meta" in fast.get_deferred_fields()
    assert fast == saved and fast.pk == saved.pk


def test_a_deferred_field_of_a_loaded_job_is_read_from_the_database():
    saved = JobFactory(meta={"k": "v"}, priority=7)
    (fast,) = loaded_jobs("default", ["id"], [[saved.id]])
    assert fast.meta == {"k": "v"} and fast.priority == 7
    fast.priority = 9
    fast.save(update_fields=["priority"])
    assert Job.objects.get(pk=saved.pk).priority == 9


def test_init_receivers_hear_of_loaded_jobs():
    saved = JobFactory()
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        (fast,) = loaded_jobs("default", FIELDS, [loaded(saved)])
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen == [fast] and fast._state.db == "default"


def test_a_pushed_job_is_what_the_constructor_builds():
    values = {f.attname: f.get_default() for f in Job._meta.concrete_fields}
    values.update(type="t.x", queue="default", args=[1], state="available", priority=3)
    fast, slow = unsaved_job(dict(values)), Job(**values)
    assert {k: v for k, v in vars(fast).items() if k != "_state"} == {
        k: v for k, v in vars(slow).items() if k != "_state"
    }
    assert fast._state.adding and fast._state.db is None
    assert not fast.get_deferred_fields()


def test_init_receivers_hear_of_pushed_jobs():
    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(receiver, sender=Job)
    try:
        pushed = django_ojs.enqueue_many([{"type": "t.seen", "args": [i]} for i in range(2)])
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert seen[:2] == pushed and [j.args for j in pushed] == [[0], [1]]


def test_no_json_field_of_a_job_has_a_decoder():
    # Claims and completions read rows in binary: PostgreSQL's jsonb arrives decoded by
    # json.loads, and JSONField.from_db_value is not called. A custom decoder would be
    # skipped, so there must be none (drivers/postgresql/driver.py, PostgreSQLDriver._load).
    json_fields = [f for f in Job._meta.concrete_fields if isinstance(f, models.JSONField)]
    assert len(json_fields) >= 5
    assert [f.name for f in json_fields if f.decoder is not None] == []
