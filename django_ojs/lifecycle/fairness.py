"""Fair claims between tenants (OJS fair scheduling §9, multi-tenancy §7.1-§7.2): the
virtual time a job of a tenant gets when it becomes available.

Claims take a queue's available jobs by priority, then by ``vtime``, then by id, through
one index (``ojs_job_claim_idx``): the claim itself does not change. Fairness is in the
numbers. A job of tenant *t* that becomes available in queue *q* at priority *p* gets

    vtime = max(head, tail) + 1 / weight(t)

where *head* is the smallest ``vtime`` of the tenanted jobs waiting in (*q*, *p*) (the
turn being served now) and *tail* the largest of *t*'s own jobs waiting there (its last
turn). A tenant that pushes 100,000 jobs takes turns head+1 … head+100,000; one that then
pushes one job takes turn head+1: served in the next round, not after the 100,000. A
weight of 10 takes turns a tenth apart: ten jobs for every one of a tenant of weight 1
(stride scheduling). Jobs without a tenant keep ``vtime`` 0: in their queue and priority
they come first, in id order, as before. See ``docs/explanation/fair-scheduling.md``.

Concurrent pushes of one tenant may read the same tail and take the same turn; the id
breaks the tie. That tenant then gets a few more jobs into a round, never a job fewer
for the others' next round.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django_ojs.conf import settings
from django_ojs.drivers import get_driver
from django_ojs.envelope import JobSpec
from django_ojs.models import Job
from django_ojs.states import JobState
from django_ojs.tenancy import tenant_of

#: (queue, tenant, priority) -> (the last turn given, the tenant's step): what
#: :func:`stamp` continues from.
Turns = dict[tuple[str, str, int], tuple[float, float]]

_AVAILABLE = JobState.AVAILABLE.value


def keys_of_specs(specs: Iterable[JobSpec]) -> set[tuple[str, str, int]]:
    """The (queue, tenant, priority) of each spec that has a tenant (when fair)."""
    if not settings.TENANT_FAIRNESS:
        return set()
    return {
        (spec.queue, tenant, spec.priority) for spec in specs if (tenant := tenant_of(spec.meta))
    }


def stamp_new(rows: Sequence[Job], using: str) -> None:
    """:func:`stamp` rows about to be inserted, reading their tenants' turns first."""
    if not settings.TENANT_FAIRNESS:
        return
    keys = {(r.queue, r.tenant, r.priority) for r in rows if r.tenant and r.state == _AVAILABLE}
    if keys:
        stamp(rows, turns(keys, using))


def turns(keys: Iterable[tuple[str, str, int]], using: str) -> Turns:
    """Where each of ``keys`` stands now: its base (max of head and tail) and its step."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    return get_driver(using).fair_bases(wanted)


def stamp(rows: Sequence[Job], given: Turns) -> list[Job]:
    """Give each available row with a tenant its turn, in the order of ``rows``
    (``given`` is updated: the next rows continue from there). The stamped rows."""
    stamped = []
    for row in rows:
        tenant = row.tenant
        if not tenant or row.state != _AVAILABLE:
            continue
        key = (row.queue, tenant, row.priority)
        found = given.get(key)
        if found is None:
            continue  # not asked for (fairness off when the turns were read)
        base, step = found
        base += step
        row.vtime = base
        given[key] = (base, step)
        stamped.append(row)
    return stamped


def next_turn(queue: str, tenant: str, priority: int, using: str) -> float | None:
    """The turn of one job of ``tenant`` that becomes available now (an operator's run
    now, an activation, a retry from the dead letter, a requeue); ``None`` without a
    tenant or with fairness off."""
    if not tenant or not settings.TENANT_FAIRNESS:
        return None
    key = (queue, tenant, priority)
    base, step = turns([key], using)[key]
    return base + step


def restamp(jobs: Sequence[Any], using: str) -> None:
    """Turns for jobs that have just become available (a promotion of scheduled or
    retryable jobs): read where their tenants stand, give them the next turns, in id
    order, and store them."""
    if not settings.TENANT_FAIRNESS:
        return
    mine = sorted((j for j in jobs if j.tenant), key=lambda j: j.id)
    if not mine:
        return
    # A retried job still has the turn of its last wait: not the head of the queue now.
    Job.objects.using(using).filter(id__in=[j.id for j in mine], vtime__gt=0).update(vtime=0.0)
    given = turns({(j.queue, j.tenant, j.priority) for j in mine}, using)
    stamped = stamp(mine, given)
    if stamped:
        Job.objects.using(using).bulk_update(stamped, ["vtime"], batch_size=500)
