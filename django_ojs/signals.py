"""Django signals sent by ``lifecycle`` after the transaction of a transition commits.

``event_emitted(sender=Event, event=<OJS event envelope dict>)`` fires once per lifecycle
event (``job.enqueued``, ``job.completed``, ``queue.paused``...). Nothing else sends them.
"""

from __future__ import annotations

from django.dispatch import Signal

event_emitted = Signal()
