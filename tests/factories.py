"""factory-boy factories: the only code allowed to insert jobs in any state directly.

``JobFactory(state=...)`` or a trait (``JobFactory(active=True)``) builds a row as the
lifecycle would have left it, so tests can start from any state without a flow.
"""

from __future__ import annotations

from datetime import timedelta

import factory
from django.utils import timezone

from django_ojs.ids import uuid7
from django_ojs.models import Job, Queue, WebhookSubscription, Worker
from django_ojs.webhooks import signing


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    id = factory.LazyFunction(uuid7)
    type = "test.echo"
    queue = "default"
    args = factory.LazyFunction(lambda: ["hello"])
    state = "available"
    created_at = factory.LazyFunction(timezone.now)
    enqueued_at = factory.LazyAttribute(lambda o: o.created_at)

    class Params:
        scheduled = factory.Trait(
            state="scheduled",
            scheduled_at=factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1)),
        )
        pending = factory.Trait(state="pending")
        active = factory.Trait(
            state="active",
            attempt=1,
            worker_id="worker-1",
            started_at=factory.LazyFunction(timezone.now),
            heartbeat_at=factory.LazyFunction(timezone.now),
            visible_until=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=30)),
            timeout_at=factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=30)),
            stalled_at=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=60)),
        )
        # An active job whose reservation ran out (its worker went silent).
        expired = factory.Trait(
            state="active",
            attempt=1,
            worker_id="worker-1",
            started_at=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=60)),
            visible_until=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=1)),
            timeout_at=factory.LazyFunction(lambda: timezone.now() + timedelta(minutes=30)),
        )
        retryable = factory.Trait(
            state="retryable",
            attempt=1,
            next_attempt_at=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=30)),
            error={
                "code": "handler_error",
                "type": "handler_error",
                "message": "boom",
                "attempt": 1,
            },
            errors=factory.LazyAttribute(lambda o: [o.error]),
        )
        completed = factory.Trait(
            state="completed",
            attempt=1,
            started_at=factory.LazyFunction(timezone.now),
            completed_at=factory.LazyFunction(timezone.now),
            result=None,
        )
        cancelled = factory.Trait(
            state="cancelled", cancelled_at=factory.LazyFunction(timezone.now)
        )
        discarded = factory.Trait(
            state="discarded",
            attempt=3,
            discarded_at=factory.LazyFunction(timezone.now),
            completed_at=factory.LazyFunction(timezone.now),
            error={
                "code": "handler_error",
                "type": "handler_error",
                "message": "boom",
                "attempt": 3,
            },
            errors=factory.LazyAttribute(lambda o: [o.error]),
        )


class WorkerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Worker
        django_get_or_create = ("id",)

    id = factory.Sequence(lambda n: f"worker-{n}")
    hostname = "test-host"
    pid = factory.Sequence(lambda n: 10_000 + n)
    queues = factory.LazyFunction(lambda: ["default"])
    concurrency = 10


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"queue-{n}")


class WebhookSubscriptionFactory(factory.django.DjangoModelFactory):
    """A subscription row as ``lifecycle.create_webhook`` leaves it (no address check)."""

    class Meta:
        model = WebhookSubscription

    id = factory.LazyFunction(uuid7)
    url = factory.Sequence(lambda n: f"https://hooks{n}.example.com/ojs")
    events = factory.LazyFunction(lambda: ["job.completed"])
    secret = factory.LazyFunction(signing.new_secret)
