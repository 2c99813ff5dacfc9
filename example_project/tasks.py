"""Django tasks (``django.tasks`` on Django 6, the ``django-tasks`` backport on 5.2) that
run on OJS: ``TASKS`` in settings names ``django_ojs.tasks.OJSBackend``, so
``manage.py ojs_worker`` runs them beside the ``@django_ojs.handler`` jobs of ``jobs.py``.
"""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task


@task()
def send_welcome_email(user_id: int, *, template: str = "welcome") -> dict[str, object]:
    """A task enqueued with ``send_welcome_email.enqueue(user.pk)`` from a view."""
    return {"user_id": user_id, "template": template, "sent": True}


@task(takes_context=True, ojs={"retry": {"max_attempts": 3, "initial_interval": "PT0.1S"}})
def flaky_sync(context, n: int) -> dict[str, int]:
    """Fails on its first attempt, succeeds on the second (retries come from OJS)."""
    if context.attempt < 2:
        raise ConnectionError("upstream not ready")
    return {"n": n, "attempt": context.attempt}
