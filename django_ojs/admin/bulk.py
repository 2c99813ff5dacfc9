"""Bulk admin actions: ask for confirmation, make one core call per object, report per object.

An action here never decides whether an object may change: the core call does, and refuses
with an :class:`~django_ojs.exceptions.OJSError` that becomes a "skipped: …" line. No ORM
writes and no transactions in this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Model
from django.http import HttpRequest, JsonResponse
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
        return summary(
            self.done,
            past,
            {reason: (len(labels), labels) for reason, labels in self.skipped.items()},
        )

    @property
    def level(self) -> int:
        return level(self.done, bool(self.skipped))


def summary(done: int, past: str, skipped: dict[str, tuple[int, Sequence[str]]]) -> str:
    """``3 retried; 1 skipped: already completed (0190c2f1…)`` from ``reason → (n, labels)``.

    At most ``NAMED_SKIPS_LIMIT`` labels are named per reason; the rest are counted.
    """
    parts = [f"{done} {past}"]
    for reason, (count, labels) in skipped.items():
        named = ", ".join(labels[:NAMED_SKIPS_LIMIT])
        more = count - min(len(labels), NAMED_SKIPS_LIMIT)
        if more > 0:
            named += f" and {more} more"
        parts.append(f"{count} skipped: {reason} ({named})")
    return "; ".join(parts)


def level(done: int, skipped: bool) -> int:
    """Green when nothing was skipped, yellow when some were, red when nothing was done."""
    if not skipped:
        return messages.SUCCESS
    return messages.WARNING if done else messages.ERROR


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


def selects_across(request: HttpRequest) -> bool:
    """The operator chose "Select all N" on the changelist: every object matching the filter."""
    return request.POST.get("select_across") in ("1", "True", "true", "on")


def gone(request: HttpRequest, found: Iterable[str]) -> list[str]:
    """Selected keys missing from the action's queryset: changed since the page was shown.

    For example a dead-lettered job retried by someone else before this confirmation.
    """
    if selects_across(request):
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
    across: bool = False,
    estimated: bool = False,
) -> TemplateResponse:
    """The "are you sure?" page of a bulk action; it posts the same selection back.

    With ``across`` the selection is every object matching the changelist's filter:
    ``rows`` is a sample, ``total`` the (possibly ``estimated``) number that matches.
    """
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
        "across": across,
        "estimated": estimated,
        "media": model_admin.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/ojs/confirm_action.html", context)


# -- every object matching a filter, in batches ----------------------------------------------

#: The progress page's hidden field that carries an :class:`AcrossRun`.
STATE_FIELD = "ojs_state"


@dataclass
class AcrossRun:
    """Where an action on every matching object stands: carried by the progress page.

    Objects are taken in primary-key order, ``after`` the last one acted on, so each
    request acts on the next batch and a stopped run resumes where it stopped. The state
    travels with the page (a hidden field), nothing is kept on the server: closing the
    page stops the run between two batches, and each batch's calls are already committed.
    """

    total: int
    estimated: bool = False
    after: str = ""
    done: int = 0
    skipped: dict[str, list[Any]] = field(default_factory=dict)  # reason → [count, labels]
    finished: bool = False

    @property
    def processed(self) -> int:
        return self.done + sum(int(count) for count, _ in self.skipped.values())

    def add(self, outcome: Outcome) -> None:
        self.done += outcome.done
        for reason, labels in outcome.skipped.items():
            count, named = self.skipped.setdefault(reason, [0, []])
            self.skipped[reason] = [count + len(labels), (named + labels)[:NAMED_SKIPS_LIMIT]]

    def message(self, past: str) -> str:
        return summary(
            self.done,
            past,
            {reason: (count, named) for reason, (count, named) in self.skipped.items()},
        )

    @property
    def level(self) -> int:
        return level(self.done, bool(self.skipped))

    def dump(self) -> str:
        return json.dumps(
            {"total": self.total, "estimated": self.estimated, "after": self.after,
             "done": self.done, "skipped": self.skipped, "finished": self.finished}
        )  # fmt: skip

    @classmethod
    def load(cls, request: HttpRequest) -> AcrossRun | None:
        """The run posted back by the progress page; ``None`` before the first batch.

        Raises ``ValueError`` on a state the page did not write.
        """
        raw = request.POST.get(STATE_FIELD)
        if raw is None:
            return None
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        skipped = data.get("skipped", {})
        if not isinstance(skipped, dict) or not all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], int)
            and isinstance(v[1], list) for v in skipped.values()
        ):  # fmt: skip
            raise ValueError("bad skipped")
        total, done, after = data.get("total"), data.get("done"), data.get("after", "")
        if not isinstance(total, int) or not isinstance(done, int) or not isinstance(after, str):
            raise ValueError("bad counters")
        return cls(total=total, estimated=bool(data.get("estimated")), after=after, done=done,
                   skipped={str(k): v for k, v in skipped.items()},
                   finished=bool(data.get("finished")))  # fmt: skip


def wants_json(request: HttpRequest) -> bool:
    """The progress page's script asks for one batch's outcome as JSON."""
    return request.POST.get("ojs_format") == "json"


def across_json(run: AcrossRun, past: str) -> JsonResponse:
    return JsonResponse(
        {"state": run.dump(), "processed": run.processed, "total": run.total,
         "done": run.done, "finished": run.finished, "message": run.message(past)}
    )  # fmt: skip


def progress_page(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[_M],
    *,
    action: str,
    title: str,
    past: str,
    run: AcrossRun,
    keys: Sequence[str],
) -> TemplateResponse:
    """The page that runs an action on every matching object, one batch per request."""
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": opts,
        "app_label": opts.app_label,
        "action": action,
        "run": run,
        "state": run.dump(),
        "summary": run.message(past),
        "keys": keys,
        "state_field": STATE_FIELD,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "list_url": request.get_full_path(),
        "media": model_admin.media,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/ojs/bulk_progress.html", context)
