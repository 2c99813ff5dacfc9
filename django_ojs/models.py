"""The job store: ``Job``, ``Worker``, ``Queue`` and ``Event`` rows and their read vocabulary.

Fields, indexes, constraints and QuerySet *reads* only. Nothing here changes a job's
state: every write of ``Job.state`` and the fields that move with it is in ``lifecycle``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from django_ojs import envelope, states
from django_ojs.conf import settings as ojs_settings
from django_ojs.ids import uuid7, uuid7_time
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


class Workflow(models.Model):
    """A chain, group or batch of jobs (OJS workflows §4-§6) and its exact counters.

    Counters and ``state`` are written only by ``lifecycle.workflows``, under the row lock,
    in the same transaction as the member job's terminal transition.
    """

    KINDS = ("chain", "group", "batch")
    STATES = ("pending", "running", "completed", "failed", "cancelled")

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=16, choices=[(k, k) for k in KINDS])
    name = models.CharField(max_length=255, blank=True, default="")
    state = models.CharField(max_length=16, choices=[(s, s) for s in STATES], default="running")
    total = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    #: ``{"on_complete"|"on_success"|"on_failure": <job wire dict>}`` (batch only).
    callbacks = models.JSONField(default=dict, blank=True)
    #: The callback kinds already enqueued (each fires at most once, §6.5).
    fired = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    #: §9.6: ``{failed_step_index?, failed_job_ids, errors}`` once a member or callback failed.
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    # Nesting (workflows §10): a workflow that is a step (chain) or member (group, batch) of
    # another. ``root`` is the outermost workflow (NULL on the outermost itself), ``depth``
    # 0 there. A nested workflow waits in ``pending`` until its parent starts it, with the
    # upstream results it was given in ``parent_results``; ``result`` is what it hands on.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    parent_step = models.IntegerField(null=True, blank=True)
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="descendants"
    )
    depth = models.PositiveSmallIntegerField(default=0)
    parent_results = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ojs_workflow"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["state", "finished_at"], name="ojs_workflow_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name or self.id}"

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.cancelled


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
            # The claim: an index scan in (queue, priority DESC, id) order over available
            # jobs only (OJS core §7.2: queue order, then priority, then FIFO).
            models.Index(
                fields=["queue", "-priority", "id"],
                name="ojs_job_claim_idx",
                condition=Q(state="available"),
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
            # Rate limits: what is waiting per key, and each key's active jobs and starts.
            models.Index(
                fields=["queue", "-priority", "id"],
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


class WorkerQuerySet(models.QuerySet["Worker"]):
    def stale(self, before: datetime) -> WorkerQuerySet:
        """Workers whose last heartbeat is older than ``before``."""
        return self.filter(last_heartbeat_at__lt=before)


class Worker(models.Model):
    """A worker process known to the server (worker protocol §3-§4)."""

    class Directive(models.TextChoices):
        NONE = "", "running"
        QUIET = "quiet", "quiet"
        TERMINATE = "terminate", "terminate"

    id = models.CharField(max_length=255, primary_key=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    queues = models.JSONField(default=list, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    labels = models.JSONField(default=list, blank=True)
    #: What the worker last reported: running, quiet or terminate.
    state = models.CharField(max_length=16, default="running")
    #: What the operator wants; delivered in the next heartbeat reply.
    directive = models.CharField(max_length=16, choices=Directive.choices, default="", blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat_at = models.DateTimeField(default=timezone.now)
    active_job_ids = models.JSONField(default=list, blank=True)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "ojs_worker"
        ordering = ["-last_heartbeat_at"]
        permissions = [("direct_worker", "Can quiet or terminate workers")]

    def __str__(self) -> str:
        return self.id


class Queue(models.Model):
    """A named queue; created on first enqueue. Paused queues are not fetched from."""

    name = models.CharField(max_length=128, primary_key=True)
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    #: Queue-level limit (rate-limiting §7.2): ``{"concurrency": N}``; NULL = none.
    limits = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "ojs_queue"
        ordering = ["name"]
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return self.name


class Maintenance(models.Model):
    """The maintenance switch (OJS admin API §12.1): one row (``id`` 1), or none (off).

    While ``enabled``, fetches claim nothing, the reaper promotes no scheduled job and
    fires no cron entry; enqueueing is still accepted. Written by
    ``lifecycle.set_maintenance`` only; read through ``lifecycle.in_maintenance`` (a short
    per-process cache, ``OJS_MAINTENANCE_CACHE_SECONDS``).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    enabled = models.BooleanField(default=False)
    reason = models.CharField(max_length=500, blank=True, default="")
    enabled_at = models.DateTimeField(null=True, blank=True)
    #: ``enabled_at`` + the ``estimated_duration`` given; informative only (nothing ends
    #: maintenance by itself).
    estimated_end = models.DateTimeField(null=True, blank=True)
    #: Who switched it last (the audit trail has the whole history).
    changed_by = models.CharField(max_length=255, blank=True, default="")
    changed_at = models.DateTimeField(null=True, blank=True)

    objects: ClassVar[models.Manager[Maintenance]] = models.Manager()

    class Meta:
        db_table = "ojs_maintenance"
        default_permissions = ("view",)
        permissions = [("switch_maintenance", "Can switch maintenance mode on and off")]
        verbose_name = "maintenance mode"
        verbose_name_plural = "maintenance mode"

    def __str__(self) -> str:
        return "maintenance on" if self.enabled else "maintenance off"


class IdempotencyKey(models.Model):
    """The stored answer to a bulk request sent with an idempotency key (bulk operations
    §10): the same key and body within ``OJS_BULK_IDEMPOTENCY_SECONDS`` get this answer
    again; the same key with another body is a conflict. Keys are scoped per operation.

    Written by ``lifecycle.idempotent`` only; deleted by the reaper once expired.
    """

    operation = models.CharField(max_length=16)
    key = models.CharField(max_length=256)
    #: SHA-256 of the request body in canonical JSON (without the key itself).
    fingerprint = models.CharField(max_length=64)
    #: ``None`` while the first request is being processed.
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects: ClassVar[models.Manager[IdempotencyKey]] = models.Manager()

    class Meta:
        db_table = "ojs_idempotency_key"
        constraints = [
            models.UniqueConstraint(fields=["operation", "key"], name="ojs_idempotency_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.operation}:{self.key}"


class RateLimitState(models.Model):
    """Per rate-limit key: whether it holds jobs back (§11.1 events) and any override."""

    key = models.CharField(max_length=255, primary_key=True)
    held = models.BooleanField(default=False)
    changed_at = models.DateTimeField(default=timezone.now)
    #: An operator's override of the key's limits (rate-limiting §10.2), until a time.
    override = models.JSONField(null=True, blank=True)
    override_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "ojs_rate_limit_state"

    def __str__(self) -> str:
        return self.key


_now = timezone.now


class CronJob(models.Model):
    """A periodic job (OJS cron extension §2): fires ``type``/``args`` on a schedule.

    ``next_run_at`` is the next slot; the evaluator that moves it forward (a
    compare-and-set on its current value) is the one that enqueues the slot's job, in the
    same transaction: one job per slot with any number of workers and no leader.
    """

    class Overlap(models.TextChoices):
        SKIP = "skip"
        ALLOW = "allow"
        CANCEL_PREVIOUS = "cancel_previous"
        ENQUEUE = "enqueue"

    class Origin(models.TextChoices):
        API = "api", "HTTP API or admin"
        SETTINGS = "settings", "OJS_CRON setting"
        CODE = "code", "@periodic decorator"

    name = models.CharField(max_length=255, primary_key=True)
    expression = models.CharField(max_length=255)
    timezone = models.CharField(max_length=64, default="UTC")
    type = models.CharField(max_length=255)
    args = models.JSONField(default=list, blank=True)
    #: Job options as the enqueue request's ``options`` (queue, priority, retry, meta...).
    options = models.JSONField(default=dict, blank=True)
    overlap_policy = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.SKIP)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True, default="")
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.API)
    #: The next slot (UTC); NULL while disabled (§2.2).
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_job_id = models.UUIDField(null=True, blank=True)
    run_count = models.PositiveBigIntegerField(default=0)
    skip_count = models.PositiveBigIntegerField(default=0)
    # ``timezone`` above is a field: the clock is reached through the module's alias.
    created_at = models.DateTimeField(default=_now)
    updated_at = models.DateTimeField(default=_now)

    class Meta:
        db_table = "ojs_cron"
        ordering = ["name"]
        verbose_name = "cron job"
        indexes = [
            models.Index(
                fields=["next_run_at"], name="ojs_cron_due_idx", condition=Q(enabled=True)
            ),
        ]
        permissions = [("run_cron_now", "Can run cron jobs now")]

    def __str__(self) -> str:
        return self.name


#: How long before its id's millisecond an event stored by an earlier version may have
#: happened: its id took the clock of the statement that stored it (or of the Python
#: that built it), not the event's time.
LEGACY_EVENT_ID_LAG = timedelta(seconds=5)
_MILLISECOND = timedelta(milliseconds=1)


class EventQuerySet(models.QuerySet["Event"]):
    def with_id(self, event_id: Any) -> Event | None:
        """The event whose id is ``event_id`` (a UUID), or None.

        An event's id starts with its time's millisecond (``ids.uuid7_at``, and the
        drivers' SQL from the same time), so the event is found through
        ``ojs_event_time_idx`` among the few of that millisecond: no unique index is
        kept on the ids, one index entry less for each of the millions of events
        written (74 random bits per millisecond do not collide). Events stored before
        ids were made this way are looked for up to ``LEGACY_EVENT_ID_LAG`` earlier.
        """
        if getattr(event_id, "version", None) != 7:
            return None
        at = uuid7_time(event_id)
        # Unordered, so that the time index serves it (ORDER BY seq could pick the key).
        for since in (at - _MILLISECOND, at - LEGACY_EVENT_ID_LAG):
            found = list(
                self.filter(
                    id=event_id, time__gte=since, time__lt=at + 2 * _MILLISECOND
                ).order_by()[:1]
            )
            if found:
                return found[0]
        return None


class Event(models.Model):
    """A lifecycle event (OJS events §2), written in the transaction of its transition."""

    seq = models.BigAutoField(primary_key=True)
    #: A UUIDv7 of the event's time's millisecond (see ``EventQuerySet.with_id``).
    #: Unique by construction, without a unique index.
    id = models.UUIDField(default=uuid7, editable=False)
    type = models.CharField(max_length=64)
    source = models.CharField(max_length=255)
    subject = models.CharField(max_length=255, blank=True, default="")
    time = models.DateTimeField(default=timezone.now)
    job_id = models.UUIDField(null=True, blank=True)
    queue = models.CharField(max_length=128, blank=True, default="")
    #: The event's data as stored: a job event's has no ``job_id`` and ``queue`` keys,
    #: which are the columns above (``wire_data`` and ``to_wire()`` put them back).
    data = models.JSONField(default=dict)

    objects = EventQuerySet.as_manager()

    class Meta:
        db_table = "ojs_event"
        ordering = ["seq"]
        indexes = [
            models.Index(fields=["job_id", "seq"], name="ojs_event_job_idx"),
            models.Index(fields=["time"], name="ojs_event_time_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.subject}"

    @property
    def wire_data(self) -> Any:
        """The event's data as its envelope carries it: ``data`` with the job's id and
        queue (events §3), which a job event stores as columns, not in ``data``
        (events stored by earlier versions have them in both)."""
        data = self.data
        if not isinstance(data, dict) or (self.job_id is None and not self.queue):
            return data
        columns: dict[str, Any] = {}
        if self.job_id is not None and "job_id" not in data:
            columns["job_id"] = str(self.job_id)
        if self.queue and "queue" not in data:
            columns["queue"] = self.queue
        return {**columns, **data} if columns else data

    def to_wire(self) -> dict[str, Any]:
        """The event as its OJS envelope."""
        return {
            "specversion": envelope.SPECVERSION,
            "id": f"evt_{self.id}",
            "type": self.type,
            "source": self.source,
            "time": envelope.format_timestamp(self.time),
            "subject": self.subject,
            "datacontenttype": "application/json",
            "data": self.wire_data,
        }


class ApiKey(models.Model):
    """A bearer credential for the OJS HTTP API (``manage.py ojs_apikey create``).

    Only a scrypt hash of the secret is stored (OJS security SEC-020); ``prefix`` is the
    public key id shown in lists. Created, verified and revoked by ``django_ojs.apikeys``.
    """

    class Scope(models.TextChoices):
        """The roles of OJS security §7.3; what each may call is ``api.permissions.ROLES``."""

        PRODUCER = "producer", "producer (enqueue only)"
        WORKER = "worker", "worker (fetch, ack, nack, heartbeat, progress)"
        OPERATOR = "operator", "operator (enqueue, inspect, cancel, list queues, dead letter)"
        ADMIN = "admin", "admin (every endpoint)"

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed_secret = models.CharField(max_length=255, editable=False)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    #: Queues the key may use (names, or ``prefix*``); empty: every queue (security §7.1).
    queues = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "ojs_apikey"
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} (ojs_{self.prefix}_…, {self.scope})"

    @property
    def principal(self) -> str:
        """How logs and the audit trail name the key: ``apikey:<name> (ojs_<prefix>_…)``."""
        return f"apikey:{self.name} (ojs_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class AuditEntry(models.Model):
    """One operator or admin action, who did it and from where (OJS security §11).

    Written by the lifecycle in the action's transaction (``lifecycle/audit.py``), so an
    entry exists exactly when the action happened. Append-only: never changed or deleted
    by django-ojs (prune it yourself if you must).
    """

    class Source(models.TextChoices):
        HTTP = "http", "HTTP API"
        ADMIN = "admin", "Django admin"
        COMMAND = "command", "management command"
        PYTHON = "python", "Python API"

    time = models.DateTimeField(default=timezone.now, editable=False, db_index=True)
    #: ``apikey:<name> (ojs_<prefix>_…)``, ``admin:<username>``: never a secret.
    actor = models.CharField(max_length=255, db_index=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    #: ``job.cancel``, ``dead_letter.retry``, ``queue.pause``, ``worker.quiet``...
    action = models.CharField(max_length=64, db_index=True)
    queue = models.CharField(max_length=255, blank=True, default="")
    job_ids = models.JSONField(default=list, blank=True)
    worker_id = models.CharField(max_length=255, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    source_ip = models.CharField(max_length=64, blank=True, default="")
    request_id = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        db_table = "ojs_audit"
        ordering = ["-time", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit trail"

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.actor} {self.action}"


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


class WebhookSubscription(models.Model):
    """A webhook endpoint and the events it receives (OJS webhooks §5.1).

    The secrets sign deliveries (webhooks §8.1); the previous one keeps signing until
    ``previous_secret_expires_at`` after a rotation (§8.3). ``since_seq`` is the last
    event ``seq`` stored when the subscription was made: it receives the events after it.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    url = models.CharField(max_length=2048)
    events = models.JSONField(default=list)
    #: ``{"queues": [...], "job_types": [...]}``, each optional (webhooks §5.2).
    filter = models.JSONField(default=dict, blank=True)
    active = models.BooleanField(default=True)
    secret = models.CharField(max_length=255, editable=False)
    previous_secret = models.CharField(max_length=255, blank=True, default="", editable=False)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True, editable=False)
    metadata = models.JSONField(default=dict, blank=True)
    since_seq = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    last_delivery_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_delivery_status = models.IntegerField(null=True, blank=True, editable=False)
    #: Failed attempts since the last successful delivery.
    failure_count = models.IntegerField(default=0, editable=False)

    class Meta:
        db_table = "ojs_webhook_subscription"
        ordering = ["created_at", "id"]
        verbose_name = "webhook subscription"

    def __str__(self) -> str:
        return f"{self.url} ({', '.join(map(str, self.events))})"

    @property
    def public_id(self) -> str:
        """The id as the HTTP API shows it (``sub_<uuid>``, webhooks §5.1)."""
        return f"sub_{self.id}"


class WebhookCursor(models.Model):
    """How far the webhook dispatcher has read ``ojs_event`` (one row, ``id=1``)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    seq = models.BigIntegerField(default=0)

    class Meta:
        db_table = "ojs_webhook_cursor"

    def __str__(self) -> str:
        return f"webhook cursor at event {self.seq}"
