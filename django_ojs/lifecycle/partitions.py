"""The optional time-partitioned layout: turn it on, keep periods ahead, drop expired ones.

On PostgreSQL, ``ojs_job`` and ``ojs_event`` can be split into one partition per day,
week or month (``manage.py ojs_partition``). Retention then drops a whole partition
instead of deleting its rows one by one, when the partition holds nothing retention
keeps:

* an event partition goes once its period ended before the events cut-off;
* a job partition goes once no row in it is kept by :func:`.maintenance.prune_groups`:
  no unfinished job, no finished job still inside its retention (its queue's own, where
  the queue has one) or its ``result_ttl``,
  no job of an unfinished workflow. That is read without a lock (it may read the whole
  partition); under the drop's lock, a quick indexed look then makes sure no job of it
  became unfinished meanwhile (a retry, a late insert: the only ways a row that could
  go becomes one that must stay). A partition that still holds kept rows stays while
  the ordinary batched prune deletes its other rows; once it is down to
  :data:`COMPACT_ROWS` rows, the kept ones move to the default partition and it goes.

The reaper runs :func:`maintain` before each prune; nothing here runs on SQLite.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_ojs.drivers import get_driver
from django_ojs.drivers.periods import INTERVALS, Partition, Partitions, next_start, period_start
from django_ojs.exceptions import ValidationError
from django_ojs.ids import uuid7_floor, uuid7_time
from django_ojs.lifecycle.leadership import lead
from django_ojs.lifecycle.maintenance import QueueCutoffs, prunable_jobs, prune_groups
from django_ojs.lifecycle.store import db
from django_ojs.models import Event, Job
from django_ojs.states import NON_TERMINAL_STATES

#: The tables that can be partitioned, by the name ``ojs_partition`` gives them.
TABLES = {"jobs": "ojs_job", "events": "ojs_event"}
#: The lock one process at a time holds to change partitions.
LOCK_NAME = "django_ojs.partitions"
#: Seconds a drop waits for its locks before giving up until the next pass: pushes and
#: claims queue behind a waiting ``DROP TABLE``, so this bounds how long they can stall.
LOCK_TIMEOUT = 0.5
#: How many periods back ``partition`` creates for existing rows; older rows go to the
#: default partition (and leave by the ordinary prune).
HISTORY = 14
#: An expired job period that still holds kept rows (a job scheduled far ahead, a
#: dead-lettered one) is dropped once it is down to this many rows: its kept rows move
#: to the default partition under the drop's lock. Periods would otherwise pile up,
#: one per day with a dead-lettered job, for the 180 days the dead letter keeps it, and
#: every claim reads every period.
COMPACT_ROWS = 1000


def layout(table: str, *, using: str | None = None) -> Partitions | None:
    """The partitions of ``table`` (``"jobs"`` or ``"events"``), None when it has none."""
    return get_driver(db(using)).partitions(TABLES[table])


def partition(
    tables: list[str],
    *,
    interval: str,
    premake: int,
    now: datetime | None = None,
    using: str | None = None,
) -> dict[str, Partitions]:
    """Partition ``tables`` by ``interval``, each in one transaction, copying their rows.

    Periods run from the oldest row's (at most :data:`HISTORY` periods back) to
    ``premake`` periods after the current one. A table already partitioned is left as
    it is.
    """
    using = db(using)
    if interval not in INTERVALS:
        raise ValidationError(f"interval must be one of {', '.join(INTERVALS)}", field="interval")
    now = now or timezone.now()
    driver = get_driver(using)
    out: dict[str, Partitions] = {}
    for name in tables:
        table = TABLES[name]
        found = driver.partitions(table)
        if found is not None:
            out[name] = found
            continue
        with transaction.atomic(using=using):
            start = period_start(now, interval)
            oldest = _oldest(table, using)
            for _ in range(HISTORY):
                if oldest is None or oldest >= start:
                    break
                start = period_start(start - timedelta(microseconds=1), interval)
            out[name] = driver.partition_table(
                table, interval=interval, start=start, end=_horizon(now, interval, premake)
            )
    return out


def unpartition(tables: list[str], *, using: str | None = None) -> None:
    """Make ``tables`` plain again, each in one transaction, copying their rows (the
    tables are locked meanwhile). A table that is not partitioned is left as it is."""
    using = db(using)
    driver = get_driver(using)
    for name in tables:
        if driver.partitions(TABLES[name]) is None:
            continue
        with transaction.atomic(using=using):
            driver.unpartition_table(TABLES[name])


def maintain(
    *,
    premake: int,
    completed_before: datetime | None = None,
    discarded_before: datetime | None = None,
    dead_letter_before: datetime | None = None,
    cancelled_before: datetime | None = None,
    events_before: datetime | None = None,
    queues: QueueCutoffs | None = None,
    now: datetime | None = None,
    using: str | None = None,
) -> dict[str, int]:
    """One pass over the partitioned tables: create the periods ahead, drop expired ones.

    The cut-offs, ``queues`` (the queues' own ones) included, are :func:`.maintenance.prune`'s.

    Each change is its own short transaction, under a lock that one process at a time
    holds (a second reaper stops its pass). Returns how many partitions were created
    and dropped. Tables that are not partitioned are skipped (all of them on SQLite).
    """
    using = db(using)
    now = now or timezone.now()
    driver = get_driver(using)
    out = {"created": 0, "dropped": 0}
    cutoffs = {
        "completed_before": completed_before,
        "discarded_before": discarded_before,
        "dead_letter_before": dead_letter_before,
        "cancelled_before": cancelled_before,
    }
    for table in TABLES.values():
        found = driver.partitions(table)
        if found is None:
            continue
        horizon = _horizon(now, found.interval, premake)
        end = found.ranges[-1].end if found.ranges else period_start(now, found.interval)
        assert end is not None
        while end < horizon:
            following = next_start(end, found.interval)
            with lead(LOCK_NAME, using=using) as leader:
                if not leader or not driver.add_partition(
                    table, end, following, timeout=LOCK_TIMEOUT
                ):
                    return out
            out["created"] += 1
            end = following
        for part in found.ranges:
            assert part.start is not None and part.end is not None
            unless: QuerySet[Job] | None = None
            keep: QuerySet[Job] | None = None
            if table == "ojs_event":
                if events_before is None or part.end > events_before:
                    continue
            else:
                kept = _kept(part, using, cutoffs, queues)
                if kept is None:
                    continue
                if not kept.exists():  # read without a lock: may read the whole period
                    # Since that read, a row can only have become kept by a retry or a
                    # late insert, both of which leave it unfinished: a quick indexed
                    # look, made under the drop's lock.
                    unless = _in(part, using).filter(state__in=NON_TERMINAL_STATES)
                elif _few(part, using):
                    keep = kept  # the last few kept rows move to the default partition
                else:
                    continue
            with lead(LOCK_NAME, using=using) as leader:
                if not leader:
                    return out
                if driver.drop_partition(part, unless=unless, keep=keep, timeout=LOCK_TIMEOUT):
                    out["dropped"] += 1
    return out


def _in(part: Partition, using: str, jobs: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """The jobs (of ``jobs``, default all) of partition ``part``: created in its period."""
    assert part.start is not None and part.end is not None
    jobs = Job.objects.using(using) if jobs is None else jobs
    return jobs.filter(id__gte=uuid7_floor(part.start), id__lt=uuid7_floor(part.end))


def _few(part: Partition, using: str) -> bool:
    """Whether job partition ``part`` holds at most :data:`COMPACT_ROWS` rows (read from
    its primary key, never past that many)."""
    return len(_in(part, using).values_list("pk", flat=True)[: COMPACT_ROWS + 1]) <= COMPACT_ROWS


def _kept(
    part: Partition,
    using: str,
    cutoffs: dict[str, datetime | None],
    queues: QueueCutoffs | None = None,
) -> QuerySet[Job] | None:
    """The rows of job partition ``part`` that retention keeps; None when it is too new
    for every row to be prunable yet (a job finishes after it is created)."""
    assert part.end is not None
    present = [cutoff for cutoff in cutoffs.values() if cutoff is not None]
    present += [c for cuts in (queues or {}).values() for c in cuts.values() if c is not None]
    if not present or part.end > max(present):
        return None
    rules = [rule for group in prune_groups(**cutoffs, queues=queues).values() for rule in group]
    if not rules:
        return None
    anything = rules[0]
    for rule in rules[1:]:
        anything |= rule
    prunable = _in(part, using, prunable_jobs(using).filter(anything))
    return _in(part, using).exclude(pk__in=prunable.values("pk"))


def _horizon(now: datetime, interval: str, premake: int) -> datetime:
    """The end of the period ``premake`` periods after the current one."""
    end = next_start(period_start(now, interval), interval)
    for _ in range(premake):
        end = next_start(end, interval)
    return end


def _oldest(table: str, using: str) -> datetime | None:
    if table == "ojs_event":
        return Event.objects.using(using).order_by("time").values_list("time", flat=True).first()
    first = Job.objects.using(using).order_by("id").values_list("id", flat=True).first()
    return uuid7_time(first) if first is not None and first.version == 7 else None
