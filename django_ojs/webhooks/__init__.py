"""Webhook delivery (OJS webhooks extension): sign, check addresses, send, match events.

``signing`` and ``filters`` are pure; ``addresses`` and ``transport`` do network I/O but
no database access. The ``ojs.webhook.deliver`` job handler and the test ping, which
use the lifecycle, are :mod:`django_ojs.deliveries`, above it. Subscriptions are written by ``django_ojs.lifecycle`` (``create_webhook``...), and
the reaper's dispatcher turns stored events into delivery jobs
(``lifecycle.dispatch_webhooks``).
"""

from __future__ import annotations

#: The job type of a delivery: a delivery is an OJS job (retries, dead letter, admin).
DELIVER_TYPE = "ojs.webhook.deliver"
#: The event type of the synthetic event ``POST …/test`` sends (webhooks §6.6).
TEST_EVENT_TYPE = "webhook.test"

__all__ = ["DELIVER_TYPE", "TEST_EVENT_TYPE"]
