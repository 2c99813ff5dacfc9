"""Turn the pinned OJS extension suites into test cases the conformance runner executes.

The JSON files in ``suites/`` are byte-for-byte openjobspec/ojs-conformance v0.4.0 (see
``suites/SOURCE.txt``). Some of them are written in forms that neither the official Go runner
nor its Python re-implementation (``../shared/ojs-conformance/run.py``) understand, so as
published they fail, or silently check nothing, against any server. This script rewrites
those forms, deterministically, into the runner's forms and writes the result to another
directory; ``.ci/conformance-ext.sh`` runs the runner on that directory.

Every rule below says WHY it exists: either a difference of format between the suites and
the runner (the rewritten test checks exactly what the original says), or a place where the
suite and the spec disagree on a *name* for the same thing, judged in
``docs/explanation/spec-readings.md`` ("Extension suites"). A rule never changes what a test
expects from the server; a test whose expectation disagrees with the spec is skipped by the
CI script, with its reason, not rewritten. A construct the rules do not know (a new upstream
form) is an error, so a new pin cannot slip through half understood.

    python tests/conformance_ext/rewrite.py [--src DIR] DEST [--log FILE]

Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE / "suites"

# Rule R5: the suites' site-root paths and where django-ojs serves the same endpoint.
# WHY: the suites assume the server owns the site root. django-ojs is a reusable Django app
# that a project mounts under a prefix (the example project: ``/ojs/``): its endpoints are
# ``<mount>/manifest``, ``<mount>/metrics`` and ``<mount>/v1/...``. ``/health`` is the
# observability spec's own ``GET /ojs/v1/health`` (§10.1); ``/ready`` is its readiness
# sibling, served beside it; ``/metrics`` (§8, no path given) is served at the mount point,
# beside the manifest. Only the location changes; the request and the expectations do not.
ROOT_PATHS = {
    "/health": "/ojs/v1/health",
    "/ready": "/ojs/v1/ready",
    "/metrics": "/ojs/metrics",
}

_CAPTURE_PATH = re.compile(r"^\$\.([A-Za-z0-9_.\[\]-]+)$")
_TEMPLATE = re.compile(r"\{\{([^}]*)\}\}")


class RewriteError(Exception):
    """A construct no rule knows: update the rules (and their reasons) for the new pin."""


def rewrite_case(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Return the rewritten test case and the names of the rules that changed it."""
    applied: list[str] = []
    out = json.loads(json.dumps(case))  # a deep copy that keeps key order
    test_id = out.get("test_id", "?")

    # Rule R7: "level": 0 on an extension test -> "ext".
    # WHY: upstream files for several extensions (progress, middleware, observability,
    # graceful shutdown, webhooks) say level 0, which makes the runner count them as core
    # (level 0) tests in its per-level totals and conformance level. Every EXT-* test is an
    # extension test; the runner's name for that is "ext". Reporting only: no assertion changes.
    if str(test_id).startswith("EXT-") and out.get("level") != "ext":
        out["level"] = "ext"
        applied.append("R7 level->ext")

    captures: dict[str, str] = {}
    for step in out.get("steps") or []:
        step_id = step.get("id", "")

        # Rule R1: resolve "{{name}}" templates of earlier "capture" steps.
        # WHY: runner format. Some files capture a value with a step field
        # ``"capture": {"job_id": "$.job.id"}`` and use it later as ``{{job_id}}``. The
        # runner (like the Go runner) knows neither: it ignores "capture" and leaves
        # ``{{job_id}}`` in the URL, so such a test fails against any server. Its only
        # template form is ``{{steps.<id>.response.body.<path>}}``, which names the same
        # value: the step's response body at that path.
        def resolve(text: str, known: dict[str, str] = captures, tid: str = test_id) -> str:
            return _resolve_captures(text, known, tid)

        before = json.dumps(step)
        for key in ("path", "body", "assertions", "headers"):
            if key in step:
                step[key] = _map_strings(step[key], resolve)
        if json.dumps(step) != before:
            applied.append("R1 capture templates")
        if "capture" in step:
            for name, json_path in step.pop("capture").items():
                found = _CAPTURE_PATH.match(json_path)
                if not found:
                    raise RewriteError(f"{test_id}: capture path {json_path!r} not understood")
                captures[name] = "{{steps." + step_id + ".response.body." + found.group(1) + "}}"

        # Rule R5 (see ROOT_PATHS).
        path = step.get("path", "")
        if not path.startswith("/ojs/"):
            bare = path.split("?", 1)[0]
            if bare not in ROOT_PATHS:
                raise RewriteError(f"{test_id}: path {path!r} is outside /ojs/ and not mapped")
            step["path"] = ROOT_PATHS[bare] + path[len(bare) :]
            applied.append(f"R5 path {bare}")

        assertions = step.get("assertions") or {}
        for json_path, matcher in (assertions.get("body") or {}).items():
            if not isinstance(matcher, dict):
                continue
            # Rule R2: {"$type": T} alone -> {"$exists": true, "$type": T}.
            # WHY: runner format. The runner (runner.go's matchObjectAssertion) reads "$type"
            # only inside an "$exists" matcher; alone, it treats {"$type": T} as an object
            # literal and compares the field with it (a number is "not an object"), so the
            # test fails against any server. With "$exists": true the type is checked as
            # written; a missing or null field fails either way.
            if "$type" in matcher and "$exists" not in matcher:
                assertions["body"][json_path] = {"$exists": True, **matcher}
                applied.append("R2 $type->$exists+$type")
            # Rule R3: {"$gte": N} alone -> {"range": {"min": N}}.
            # WHY: runner format. The runner has no "$gte" matcher outside "$size" (it would
            # compare the field with the object literally); its "range" matcher with "min"
            # is the same check, N <= value, on numbers.
            elif set(matcher) == {"$gte"}:
                bound = matcher["$gte"]
                if not isinstance(bound, int | float) or isinstance(bound, bool):
                    raise RewriteError(f"{test_id}: $gte bound {bound!r} not a number")
                assertions["body"][json_path] = {"range": {"min": bound}}
                applied.append("R3 $gte->range.min")

        headers = assertions.get("headers")
        if isinstance(headers, dict):
            for name, matcher in list(headers.items()):
                # Rule R4: header {"$exists": true} -> {"$match": "."}.
                # WHY: runner format. The runner drops header matchers whose values are not
                # strings (ParsedHeaderMatchers), so a header "$exists" check is silently
                # not made and the test passes without the header. "$match" "." (a
                # non-empty value) is the runner's way of saying the header is there. This
                # makes such tests stricter, never looser.
                if matcher == {"$exists": True}:
                    headers[name] = {"$match": "."}
                    applied.append("R4 header $exists->$match")
                # Rule R6: header Content-Type "<type>" -> {"$match": "^<type>( *;|$)"}.
                # WHY: runner format. The runner compares header values as whole strings;
                # a Content-Type value is a media type plus parameters (RFC 9110 §8.3), and
                # the test asks for the media type ("text/plain content type", EXT-OBS-003).
                # The Prometheus text format is served as ``text/plain; version=...;
                # charset=utf-8``. The media type must still match exactly.
                elif (
                    name.lower() == "content-type"
                    and isinstance(matcher, str)
                    and ";" not in matcher
                ):
                    headers[name] = {"$match": "^" + re.escape(matcher) + "( *;|$)"}
                    applied.append("R6 content-type media type")
                elif not isinstance(matcher, str) and not (
                    isinstance(matcher, dict) and set(matcher) <= {"$match", "$eq"}
                ):
                    raise RewriteError(f"{test_id}: header matcher {name}: {matcher!r}")

    # Any template left is one the runner cannot resolve.
    for m in _TEMPLATE.finditer(json.dumps(out)):
        if not m.group(1).startswith("steps."):
            raise RewriteError(f"{test_id}: template {m.group(0)} left unresolved")
    return out, sorted(set(applied))


def _resolve_captures(text: str, captures: dict[str, str], test_id: str) -> str:
    """Replace ``{{name}}`` with the runner template the capture ``name`` stands for."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1).strip()
        if name.startswith("steps."):
            return match.group(0)
        if name not in captures:
            raise RewriteError(f"{test_id}: unknown template {match.group(0)}")
        return captures[name]

    return _TEMPLATE.sub(sub, text)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """Apply ``fn`` to every string in a JSON value, object keys included."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k): _map_strings(v, fn) for k, v in value.items()}
    return value


def rewrite_tree(src: Path, dest: Path) -> dict[str, list[str]]:
    """Rewrite every ``*.json`` test under ``src`` into ``dest`` (same relative paths)."""
    report: dict[str, list[str]] = {}
    for source in sorted(src.rglob("*.json")):
        rel = source.relative_to(src)
        case = json.loads(source.read_text(encoding="utf-8"))
        new, applied = rewrite_case(case)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(new, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        report[f"{new.get('test_id', '?')} {rel}"] = applied
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="directory to write the rewritten suites to")
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="the pinned suites")
    parser.add_argument("--log", type=Path, help="also write which rules changed each test")
    args = parser.parse_args(argv)
    try:
        report = rewrite_tree(args.src, args.dest)
    except RewriteError as e:
        print(f"rewrite.py: {e}", file=sys.stderr)
        return 2
    lines = [f"{name}: {', '.join(rules) or 'unchanged'}" for name, rules in report.items()]
    if args.log:
        args.log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
