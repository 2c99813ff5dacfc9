"""Django tasks the backend tests enqueue (an installed app: the worker may run them)."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task()
def add(a: int, b: int = 0) -> int:
    return a + b


@task(queue_name="tasks", priority=50)
def urgent(label: str) -> str:
    return label


@task(takes_context=True)
def with_context(context, n: int) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "n": n}


@task(ojs={"retry": {"max_attempts": 2, "initial_interval": "PT0.01S", "jitter": False}})
def always_fails(reason: str) -> None:
    raise ValueError(reason)


@task()
async def async_double(n: int) -> int:
    return n * 2
