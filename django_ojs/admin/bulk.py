"""Bulk admin actions: ask for confirmation, make one core call per object, report per object.

An action here never decides whether an object may change: the core call does, and refuses
with an :class:`~django_ojs.exceptions.OJSError` that becomes a "skipped: …" line. No ORM
writes and no transactions in this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Model
from django.http import HttpRequest
from django.template.response import TemplateResponse

from django_ojs import states
from django_ojs.exceptions import InvalidTransition, NotFound, OJSError

#: Rows listed on a confirmation page; the rest are counted ("and 2,345 more").
CONFIRM_LIST_LIMIT = 200
#: Skipped objects named in the result message, per reason.
NAMED_SKIPS_LIMIT = 5

_K = TypeVar("_K")
_M = TypeVar("_M", bound=Model)

#: An operation returns ``None`` when it did its job, or a reason why it did nothing.
Operation = Callable[[_K], str | None]


def state_reason(state: str) -> str:
    """How a refusal reads: ``already completed`` for finished jobs, ``currently active`` else."""
    return f"already {state}" if states.is_terminal(state) else f"currently {state}"


def refusal_reason(exc: OJSError) -> str:
    if isinstance(exc, InvalidTransition):
        return state_reason(exc.current_state)
    if isinstance(exc, NotFound):
        return "no longer exists"
    return exc.message


@dataclass
class Outcome:
    """What a bulk action did: how many objects it changed and why it skipped the others."""

    done: int = 0
    skipped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def skipped_count(self) -> int:
        return sum(len(labels) for labels in self.skipped.values())

    def message(self, past: str) -> str:
        """``3 retried; 1 skipped: already completed (0190c2f1…)``."""
        parts = [f"{self.done} {past}"]
        for reason, labels in self.skipped.items():
            named = ", ".join(labels[:NAMED_SKIPS_LIMIT])
            more = len(labels) - NAMED_SKIPS_LIMIT
            if more > 0:
                named += f" and {more} more"
            parts.append(f"{len(labels)} skipped: {reason} ({named})")
        return "; ".join(parts)

    @property
    def level(self) -> int:
        if not self.skipped:
            return messages.SUCCESS
        return messages.WARNING if self.done else messages.ERROR


#: Why an object selected on the page is not acted on when it left the list meanwhile.
GONE = "no longer in this list"


def apply(
    items: Iterable[tuple[str, _K]], operation: Operation[_K], *, gone: Sequence[str] = ()
) -> Outcome:
    """Call ``operation(key)`` for each ``(label, key)``; refusals become skip reasons.

    ``gone`` are selected keys the list no longer holds (see :func:`gone`).
    """
    outcome = Outcome()
    if gone:
        outcome.skipped[GONE] = list(gone)
    for label, key in items:
        try:
            reason = operation(key)
        except OJSError as exc:
            reason = refusal_reason(exc)
        if reason is None:
            outcome.done += 1
        else:
            outcome.skipped.setdefault(reason, []).append(label)
    return outcome


@dataclass
class ConfirmRow:
    """One line of a confirmation page: the posted key, what to show, and a warning if any."""

    key: str
    cells: Sequence[object]
    warning: str = ""


def gone(request: HttpRequest, found: Iterable[str]) -> list[str]:
    """Selected keys missing from the action's queryset: changed since the page was shown.

    For example a dead-lettered job retried by someone else before this confirmation.
    """
    if request.POST.get("select_across") in ("1", "True", "true", "on"):
        return []
    present = set(found)
    return [key for key in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME) if key not in present]


def is_confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("post") == "yes"


def confirmation(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[_M],
    *,
    action: str,
    title: str,
    question: str,
    headers: Sequence[str],
    rows: list[ConfirmRow],
    total: int | None = None,
    submit_label: str = "Yes, I am sure",
    danger: bool = False,
) -> TemplateResponse:
    """The "are you sure?" page of a bulk action; it posts the same selection back."""
    opts = model_admin.model._meta
    total = len(rows) if total is None else total
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": opts,
        "app_label": opts.app_label,
        "action": action,
        "question": question,
        "headers": headers,
        "rows": rows[:CONFIRM_LIST_LIMIT],
        "keys": [row.key for row in rows],
        "total": total,
        "more": max(total - CONFIRM_LIST_LIMIT, 0),
        "warnings": sum(1 for row in rows if row.warning),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "submit_label": submit_label,
        "danger": danger,
        "media": model_admin.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/ojs/confirm_action.html", context)
