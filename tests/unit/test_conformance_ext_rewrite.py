"""tests/conformance_ext/rewrite.py: the pinned extension suites, made runnable, and nothing else.

The rewritten suites run against a server in ``make conformance-ext``; these tests check the
transformation itself: every pinned file is understood, the output is deterministic, each
rule does what its comment says, and no rule touches what a test sends or expects beyond it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conformance_ext import rewrite

PINNED = Path(rewrite.__file__).parent / "suites"


def _case(*steps: dict[str, object], test_id: str = "EXT-X-001", level: object = "ext") -> dict:
    return {"test_id": test_id, "level": level, "steps": list(steps)}


def test_every_pinned_suite_is_understood_and_the_output_is_deterministic(tmp_path: Path) -> None:
    first = rewrite.rewrite_tree(PINNED, tmp_path / "a")
    second = rewrite.rewrite_tree(PINNED, tmp_path / "b")
    assert first == second
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.json"))
    assert files == sorted(p.relative_to(PINNED) for p in PINNED.rglob("*.json"))
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
        text = (tmp_path / "a" / rel).read_text()
        # No template the runner cannot resolve, no path outside the mount point.
        assert "{{job_id}}" not in text
        for step in json.loads(text)["steps"]:
            assert step["path"].startswith("/ojs/")
            assert "capture" not in step


def test_capture_templates_become_step_templates() -> None:
    case = _case(
        {
            "id": "step-1",
            "path": "/ojs/v1/jobs",
            "body": {"type": "a.b"},
            "capture": {"job_id": "$.job.id"},
        },
        {
            "id": "step-2",
            "path": "/ojs/v1/admin/jobs/{{job_id}}",
            "body": {"job_id": "{{job_id}}"},
            "assertions": {"body": {"$.id": "{{job_id}}"}},
        },
    )
    out, applied = rewrite.rewrite_case(case)
    template = "{{steps.step-1.response.body.job.id}}"
    assert out["steps"][1]["path"] == f"/ojs/v1/admin/jobs/{template}"
    assert out["steps"][1]["body"] == {"job_id": template}
    assert out["steps"][1]["assertions"]["body"] == {"$.id": template}
    assert "capture" not in out["steps"][0]
    assert applied == ["R1 capture templates"]
    assert case["steps"][1]["path"].endswith("{{job_id}}")  # the input is not modified


def test_an_unknown_template_is_an_error() -> None:
    with pytest.raises(rewrite.RewriteError, match="unknown template"):
        rewrite.rewrite_case(_case({"id": "s", "path": "/ojs/v1/jobs/{{nope}}"}))


def test_type_and_gte_matchers_become_the_runners_forms() -> None:
    body = {
        "$.a": {"$type": "number"},
        "$.b": {"$gte": 1},
        "$.c": {"$exists": True, "$type": "string"},
        "$.d": {"$in": ["x"]},
        "$.e": 3,
    }
    out, _ = rewrite.rewrite_case(
        _case({"id": "s", "path": "/ojs/v1/x", "assertions": {"body": body}})
    )
    assert out["steps"][0]["assertions"]["body"] == {
        "$.a": {"$exists": True, "$type": "number"},
        "$.b": {"range": {"min": 1}},
        "$.c": {"$exists": True, "$type": "string"},
        "$.d": {"$in": ["x"]},
        "$.e": 3,
    }


def test_header_matchers_are_checked_not_dropped() -> None:
    headers = {
        "X-RateLimit-Limit": {"$exists": True},
        "Content-Type": "text/plain",
        "X-Request-ID": {"$eq": "abc"},
    }
    out, _ = rewrite.rewrite_case(
        _case({"id": "s", "path": "/ojs/v1/x", "assertions": {"headers": headers}})
    )
    rewritten = out["steps"][0]["assertions"]["headers"]
    assert rewritten["X-RateLimit-Limit"] == {"$match": "."}
    assert rewritten["X-Request-ID"] == {"$eq": "abc"}
    media_type = re.compile(rewritten["Content-Type"]["$match"])
    assert media_type.search("text/plain")
    assert media_type.search("text/plain; version=0.0.4; charset=utf-8")
    assert not media_type.search("text/plainish")
    assert not media_type.search("application/json")


def test_root_paths_map_to_the_mount_point_and_others_are_errors() -> None:
    out, _ = rewrite.rewrite_case(
        _case(
            {"id": "a", "path": "/health"},
            {"id": "b", "path": "/metrics"},
            {"id": "c", "path": "/ready?x=1"},
        )
    )
    assert [s["path"] for s in out["steps"]] == [
        "/ojs/v1/health",
        "/ojs/metrics",
        "/ojs/v1/ready?x=1",
    ]
    with pytest.raises(rewrite.RewriteError, match="outside /ojs/"):
        rewrite.rewrite_case(_case({"id": "a", "path": "/other"}))


def test_extension_tests_are_reported_as_extension_level() -> None:
    out, applied = rewrite.rewrite_case(_case({"id": "a", "path": "/ojs/v1/x"}, level=0))
    assert out["level"] == "ext"
    assert applied == ["R7 level->ext"]
    untouched, applied = rewrite.rewrite_case(
        _case({"id": "a", "path": "/ojs/v1/x"}, test_id="L0-X-001", level=0)
    )
    assert untouched["level"] == 0
    assert applied == []


def test_what_a_test_sends_is_never_changed(tmp_path: Path) -> None:
    """Request bodies and methods leave the rewrite unchanged, apart from resolved templates."""
    rewrite.rewrite_tree(PINNED, tmp_path)
    for source in PINNED.rglob("*.json"):
        original = json.loads(source.read_text())
        new = json.loads((tmp_path / source.relative_to(PINNED)).read_text())
        assert len(original["steps"]) == len(new["steps"])
        for before, after in zip(original["steps"], new["steps"], strict=True):
            assert before.get("action") == after.get("action")
            assert before.get("headers") == after.get("headers")
            body = json.dumps(before.get("body")).replace(
                "{{job_id}}", "{{steps.step-1.response.body.job.id}}"
            )
            assert json.loads(body) == after.get("body")
            if "status" in (before.get("assertions") or {}):
                assert before["assertions"]["status"] == after["assertions"]["status"]
