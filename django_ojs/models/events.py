"""Lifecycle events (OJS events): the stored rows and how to find one by its id."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.utils import timezone

from django_ojs import envelope
from django_ojs.ids import uuid7, uuid7_time

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
