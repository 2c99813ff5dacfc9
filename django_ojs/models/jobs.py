"""Jobs: the ``Job`` row (the OJS envelope and its lifecycle fields), its read vocabulary
(``JobQuerySet``), rows made without the ORM's per-field work, and the admin's proxies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from django_ojs import envelope, states
from django_ojs.conf import settings as ojs_settings
from django_ojs.ids import uuid7
from django_ojs.models.workflows import Workflow
from django_ojs.policy import default_retry_policy
from django_ojs.states import JobState


class JobQuerySet(models.QuerySet["Job"]):
    """Read vocabulary for jobs (``Job.objects.available()``, ``.due(now)``...)."""

    def in_state(self, *names: str) -> JobQuerySet:
        return self.filter(state__in=names)

    def available(self) -> JobQuerySet:
        return self.filter(state=JobState.AVAILABLE)

    def active(self) -> JobQuerySet:
        return self.filter(state=JobState.ACTIVE)

    def terminal(self) -> JobQuerySet:
        return self.filter(state__in=states.TERMINAL_STATES)

    def dead_letter(self) -> JobQuerySet:
        """Discarded jobs: the dead letter queue (digest §8.22)."""
        return self.filter(state=JobState.DISCARDED)

    def due(self, now: datetime) -> JobQuerySet:
        """Scheduled or retryable jobs whose time has come."""
        return self.filter(
            Q(state=JobState.SCHEDULED, scheduled_at__lte=now)
            | Q(state=JobState.RETRYABLE, next_attempt_at__lte=now)
        )

    def stale(self, now: datetime) -> JobQuerySet:
        """Waiting jobs past ``expires_at``, their enqueue TTL or their total timeout."""
        return self.filter(state__in=states.WAITING_STATES, stale_at__lte=now)

    def expired(self, now: datetime) -> JobQuerySet:
        """Active jobs past their reservation, execution timeout, stall limit or deadline."""
        return self.filter(state=JobState.ACTIVE).filter(
            Q(visible_until__lte=now)
            | Q(timeout_at__lte=now)
            | Q(stalled_at__lte=now)
            | Q(deadline_at__lte=now)
        )


#: ``Job.objects``: a manager with the read vocabulary of :class:`JobQuerySet`.
JobManager = models.Manager.from_queryset(JobQuerySet)


class Job(models.Model):
    """One OJS job: the envelope (core §5), its system attributes and its reservation."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    type = models.CharField(max_length=255)
    queue = models.CharField(max_length=128, default="default")
    args = models.JSONField(default=list, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    priority = models.IntegerField(default=0)
    state = models.CharField(max_length=16, choices=states.CHOICES)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    #: The retry policy as sent (normalised, ISO durations); ``None`` means the default.
    retry = models.JSONField(null=True, blank=True)
    unique = models.JSONField(null=True, blank=True)
    #: The unique policy's key (unique-jobs §4, SHA-256 hex); NULL without a policy.
    unique_key = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL = no policy
    #: The rate-limit policy (rate-limiting §6), normalised; its ``key`` is ``rate_key``.
    rate_limit = models.JSONField(null=True, blank=True)
    rate_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = no limit
    schema = models.CharField(max_length=512, null=True, blank=True)  # noqa: DJ001 - absent ≠ ""
    tags = models.JSONField(default=list, blank=True)
    #: The job's tenant (multi-tenancy §5): ``meta.tenant_id``, kept in a column so that
    #: claims, filters and the admin read it from an index; ``""`` for a job without one.
    tenant = models.CharField(max_length=255, default="", blank=True)
    #: The job's virtual time in its queue (fair scheduling, see fairness.py): claims take
    #: jobs by priority, then by this, then by id. 0 for a job without a tenant.
    vtime = models.FloatField(default=0.0)
    #: Unknown client attributes, preserved and returned (core §5.5.4).
    extra = models.JSONField(default=dict, blank=True)

    # Timeouts extension (all in milliseconds; None means the configured default).
    timeout_ms = models.PositiveBigIntegerField(null=True, blank=True)
    visibility_timeout_ms = models.PositiveBigIntegerField(null=True, blank=True)
    total_timeout_ms = models.PositiveBigIntegerField(null=True, blank=True)
    enqueue_ttl_ms = models.PositiveBigIntegerField(null=True, blank=True)
    grace_period_ms = models.PositiveBigIntegerField(null=True, blank=True)
    heartbeat_timeout_ms = models.PositiveBigIntegerField(null=True, blank=True)

    # Time attributes (core §5.3).
    scheduled_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    discarded_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    # Outcome.
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    dead_letter = models.BooleanField(default=False)

    # The reservation (worker protocol §5) and derived deadlines the reaper scans.
    worker_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = unreserved
    visible_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    #: started_at + timeout + grace period of the current attempt.
    timeout_at = models.DateTimeField(null=True, blank=True)
    #: last heartbeat (or start) + heartbeat_timeout of the current attempt.
    stalled_at = models.DateTimeField(null=True, blank=True)
    #: created_at + total_timeout: the job is discarded past it, whatever its state.
    deadline_at = models.DateTimeField(null=True, blank=True)
    #: Earliest of expires_at, enqueue TTL (until first start) and deadline_at.
    stale_at = models.DateTimeField(null=True, blank=True)

    # Workflows (OJS workflows §7): the owning workflow, the step (chain) or member (group,
    # batch) index, and the upstream results the handler sees as ``parent_results``.
    #: Indexed only where set (``ojs_job_workflow_idx``): most jobs belong to no workflow,
    #: and a full index would take an entry at every push, claim and completion.
    workflow = models.ForeignKey(
        Workflow,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="jobs",
        db_index=False,
    )
    workflow_step = models.IntegerField(null=True, blank=True)
    parent_results = models.JSONField(null=True, blank=True)

    # Results (OJS results §6-§8): how long the result is kept after completion (NULL:
    # OJS_RESULT_TTL), when the reaper deleted it, and whether someone waits for this job
    # (``django_ojs.wait``: on PostgreSQL a trigger then NOTIFYs its terminal transition).
    result_ttl = models.DurationField(null=True, blank=True)
    result_pruned_at = models.DateTimeField(null=True, blank=True)
    awaited = models.BooleanField(default=False)
    #: The last progress report (progress §7.1): ``{progress, message, data, updated_at}``.
    last_progress = models.JSONField(null=True, blank=True)

    objects = JobManager()

    # Not columns: set by some lifecycle operations on the job they return (annotations only,
    # so an instance that was not given one has no such attribute).
    #: The state before ``cancel``, ``activate``, ``discard`` or ``run_now``.
    previous_state: str
    #: When ``activate`` released the job.
    activated_at: datetime
    #: When ``retry_discarded`` made the job available again.
    re_enqueued_at: datetime
    #: The delay ``fail`` chose for a retryable job, ``None`` when it did not retry.
    retry_delay_ms: int | None
    #: Set by a push whose unique policy said ``ignore``: this is the existing job.
    deduplicated: bool
    #: Set (True) on the unsaved job ``enqueue`` returns when enqueue middleware dropped it.
    dropped: bool

    class Meta:
        db_table = "ojs_job"
        ordering = ["-id"]
        indexes = [
            # The claim: an index scan in (queue, priority DESC, vtime, id) order over
            # available jobs only (OJS core §7.2: queue order, then priority, then FIFO;
            # fair scheduling §9.3: tenants take turns within a priority, by vtime, which
            # is 0 for every job without a tenant, so those stay in id order).
            models.Index(
                fields=["queue", "-priority", "vtime", "id"],
                name="ojs_job_claim_idx",
                condition=Q(state="available"),
            ),
            # A tenant's available jobs in claim order: a fetch limited to some tenants
            # (an API key's, the X-OJS-Tenant header), and a tenant's last virtual time
            # in a queue and priority, which a push reads (fairness.stamp).
            models.Index(
                fields=["queue", "tenant", "-priority", "vtime", "id"],
                name="ojs_job_tenant_claim_idx",
                condition=Q(state="available") & ~Q(tenant=""),
            ),
            # A tenant's jobs by state: the admin's filter, the job list and the tenants'
            # statistics (only jobs that have a tenant take an entry).
            models.Index(
                fields=["tenant", "state"],
                name="ojs_job_tenant_idx",
                condition=~Q(tenant=""),
            ),
            models.Index(
                fields=["scheduled_at"],
                name="ojs_job_scheduled_idx",
                condition=Q(state="scheduled"),
            ),
            models.Index(
                fields=["next_attempt_at"],
                name="ojs_job_retryable_idx",
                condition=Q(state="retryable"),
            ),
            models.Index(
                fields=["worker_id"], name="ojs_job_active_idx", condition=Q(state="active")
            ),
            models.Index(
                fields=["stale_at"],
                name="ojs_job_stale_idx",
                condition=Q(stale_at__isnull=False)
                & Q(state__in=["scheduled", "available", "pending", "retryable"]),
            ),
            models.Index(fields=["state", "queue"], name="ojs_job_state_queue_idx"),
            # Rate limits: what is waiting per key, in claim order (tenants' turns too),
            # and each key's active jobs and starts.
            models.Index(
                fields=["queue", "-priority", "vtime", "id"],
                name="ojs_job_limited_claim_idx",
                condition=Q(state="available") & Q(rate_key__isnull=False),
            ),
            models.Index(
                fields=["rate_key", "state", "started_at"],
                name="ojs_job_rate_key_idx",
                condition=Q(rate_key__isnull=False),
            ),
            # Unique jobs: the conflict lookup of a push (key, newest first).
            models.Index(
                fields=["unique_key", "-created_at"],
                name="ojs_job_unique_idx",
                condition=Q(unique_key__isnull=False),
            ),
            models.Index(fields=["type"], name="ojs_job_type_idx"),
            # Completed jobs by completion time (retention, result expiry, the dashboard's
            # wait and run times). Partial, like every index a job's transitions touch:
            # an available or active job takes no entry in it.
            models.Index(
                fields=["completed_at"],
                name="ojs_job_completed_idx",
                condition=Q(state="completed"),
            ),
            models.Index(
                fields=["workflow"],
                name="ojs_job_workflow_idx",
                condition=Q(workflow__isnull=False),
            ),
            # The dead letter list, newest first (admin, /dead-letter): not a sort of them all.
            models.Index(
                fields=["-discarded_at"],
                name="ojs_job_discarded_idx",
                condition=Q(state="discarded"),
            ),
        ]
        permissions = [
            ("cancel_job", "Can cancel jobs"),
            ("retry_job", "Can retry dead-lettered jobs"),
            ("discard_job", "Can discard jobs"),
            ("run_job_now", "Can make scheduled or retryable jobs available now"),
            ("purge_job", "Can delete finished jobs"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return states.is_terminal(self.state)

    def to_wire(self) -> dict[str, Any]:
        """The job as an OJS JSON envelope."""
        return envelope.to_wire(
            self,
            default_retry=default_retry_policy(self.max_attempts),
            default_result_ttl=ojs_settings.RESULT_TTL,
        )


def _constructed() -> bool:
    """Whether jobs must go through their constructor: receivers of its signals listen."""
    return pre_init.has_listeners(Job) or post_init.has_listeners(Job)


def unsaved_job(values: dict[str, Any]) -> Job:
    """An unsaved ``Job`` from ``values``, every concrete field's attname and its value.

    What ``Job(**values)`` builds, without its per-field loop (see :func:`loaded_jobs`):
    a push builds one per job.
    """
    return unsaved_jobs([values])[0]


def unsaved_jobs(rows: Iterable[dict[str, Any]]) -> list[Job]:
    """:func:`unsaved_job` of each of ``rows``, asking once whether receivers listen.

    Each of ``rows`` becomes its job's ``__dict__``: the caller hands it over and keeps
    no reference (copying it into the instance's own was a second dict of 50 entries
    made per job).
    """
    if _constructed():
        return [Job(**values) for values in rows]
    new = Job.__new__
    jobs = []
    for values in rows:
        job: Job = new(Job)
        job.__dict__ = values
        values["_state"] = ModelState()
        jobs.append(job)
    return jobs


def loaded_jobs(db: str, attnames: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[Job]:
    """The jobs loaded from ``db`` whose ``attnames`` have each row's values (the other
    fields deferred), as ``Job.from_db`` builds them.

    Without ``Model.__init__``'s loop over the 50 fields (a third of a worker's per-job
    time in claims and completions): the values go into each instance's ``__dict__`` in
    one update, which is all that loop does for plain values, and a field left out reads
    as deferred, as Django decides from that ``__dict__``. Receivers of ``pre_init`` or
    ``post_init`` for jobs get ``from_db``, so their signals are still sent.
    """
    if _constructed():
        return [Job.from_db(db, list(attnames), list(values)) for values in rows]
    jobs = []
    for values in rows:
        job: Job = Job.__new__(Job)
        job.__dict__.update(zip(attnames, values, strict=True))
        state = job._state = ModelState()
        state.adding = False
        state.db = db
        jobs.append(job)
    return jobs


class DeadLetterManager(JobManager["DeadLetterJob"]):
    """Only discarded jobs (``Job.objects.dead_letter()``)."""

    def get_queryset(self) -> models.QuerySet[DeadLetterJob]:
        return super().get_queryset().filter(state=JobState.DISCARDED)


class DeadLetterJob(Job):
    """The dead letter queue as its own admin entry: a proxy of ``Job`` over discarded jobs."""

    objects: ClassVar[DeadLetterManager] = DeadLetterManager()

    class Meta:
        proxy = True
        verbose_name = "dead letter job"
        verbose_name_plural = "dead letter"


class Dashboard(Job):
    """The admin index entry of the operator dashboard. A proxy without rows of its own."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
