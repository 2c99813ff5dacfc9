"""Workflow endpoints (HB §14, workflows §11): create, get with each step, cancel (DELETE)."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from django_ojs import envelope, lifecycle, tenancy
from django_ojs.api import serializers
from django_ojs.api.permissions import CANCEL, ENQUEUE, INSPECT
from django_ojs.api.views.base import OJSView
from django_ojs.conf import settings
from django_ojs.exceptions import InvalidTransition, ValidationError
from django_ojs.models import Workflow
from django_ojs.policy import default_retry_policy
from django_ojs.tenancy import tenant_of


def _spec(item: dict[str, Any], field: str) -> envelope.JobSpec:
    try:
        return envelope.from_wire(
            item, max_bytes=settings.MAX_ENVELOPE_BYTES, retry_base=default_retry_policy()
        )
    except ValidationError as exc:
        exc.message = f"{field}: {exc.message}"
        exc.args = (exc.message,)
        exc.details["path"] = field
        raise


def _render(wf: Workflow) -> dict[str, Any]:
    nested, jobs = lifecycle.workflow_tree(wf, using=settings.DATABASE)
    return {"workflow": serializers.workflow(wf, jobs, nested)}


def _tree(data: dict[str, Any], path: str = "") -> lifecycle.WorkflowSpec:
    """The parsed request (:func:`serializers.workflow_request`) as a workflow spec."""
    at = f"{path}." if path else ""
    field = data["field"]
    members: list[envelope.JobSpec | lifecycle.WorkflowSpec] = []
    for i, item in enumerate(data["jobs"]):
        where = f"{at}{field}[{i}]"
        members.append(_tree(item["workflow"], where) if "workflow" in item else _spec(item, where))
    callbacks = {k: _spec(v, f"{at}callbacks.{k}") for k, v in data["callbacks"].items()}
    return lifecycle.WorkflowSpec(data["kind"], members, callbacks, data["name"], data["metadata"])


class WorkflowListView(OJSView):
    """``POST /ojs/v1/workflows``: create and start a chain, group or batch (201)."""

    operation = ENQUEUE
    body_required = True

    def post(self, request: Any) -> Response:
        spec = _tree(serializers.workflow_request(self.body(request)))
        # The request's tenant (header, or a key's only one) is the workflow's: its jobs
        # that name none get it, one naming another is refused (multi-tenancy §15.2).
        tenant = self.enqueue_tenant(request)
        for job in spec.jobs():
            self.require_queue(request, job.queue, ENQUEUE)
            self.require_job_tenant(request, tenant_of(job.meta) or tenant or "", ENQUEUE)
        with tenancy.use(tenant):
            wf = lifecycle.create_workflow_spec(spec)
        return Response(
            _render(wf),
            status=201,
            headers={"Location": self.location("workflow-detail", str(wf.id))},
        )


class WorkflowDetailView(OJSView):
    """``GET`` (status with every step) and ``DELETE`` (cancel) ``/ojs/v1/workflows/{id}``."""

    operation = {"GET": INSPECT, "DELETE": CANCEL}

    def get(self, request: Any, workflow_id: str) -> Response:
        return Response(_render(lifecycle.get_workflow(workflow_id)))

    def delete(self, request: Any, workflow_id: str) -> Response:
        return Response(_cancel(request, self, workflow_id))


def _cancel(request: Any, view: OJSView, workflow_id: str) -> dict[str, Any]:
    before = lifecycle.get_workflow(workflow_id)
    if before.state != "running" and before.state != "pending":
        # Workflows §11.3: a workflow already terminal (cancelled included) is a 409.
        raise InvalidTransition(
            before.id,
            before.state,
            "cancel workflow",
            {"pending", "running"},
            message=f"Workflow {before.id} is already in terminal state '{before.state}'",
        )
    wf = lifecycle.cancel_workflow(workflow_id, actor=view.actor(request))
    body = _render(wf)
    steps = body["workflow"]["steps"]
    body["workflow"]["steps_already_completed"] = sum(s["state"] == "completed" for s in steps)
    return body
