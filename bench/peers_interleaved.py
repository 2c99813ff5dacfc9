"""Drain side by side with pgqueuer, one run of each in turn (``make bench-peers-interleaved``).

The shared harness (``make bench-peers``) runs all of django-ojs's workloads, then all of
pgqueuer's a minute or two later; on a shared machine whose speed changes from minute to
minute, a ratio of the two then also measures how the machine changed. This script runs
the harness's B workload (drain 10,000 queued jobs, timed from the workers' spawn) with
each system's best configuration of the harness, django-ojs (2 processes x 500 threads)
and pgqueuer (2 processes, batches of 100), one run of each per round, the order swapped
every round, and reports both medians and each round's ratio.

It reuses the harness itself: its cluster script, its venvs (made by one run of
``bash ../shared/peerbench/run.sh ojs pgqueuer``), its timing code and each system's
bench module. django-ojs is installed into the harness's venv from this checkout first.

    python bench/peers_interleaved.py [ROUNDS]      # default 8; PEERBENCH=<harness dir>
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HARNESS = Path(os.environ.get("PEERBENCH", ROOT.parent / "shared" / "peerbench"))
VENVS = Path("/tmp/peerbench/venvs")
PYTHON = {"ojs": VENVS / "ojs/bin/python", "pgqueuer": VENVS / "pgqueuer/bin/python"}

# One drain in the harness's own terms: its reset, prefill, count and worker commands.
ONE_DRAIN = """
import json, os, sys
import common
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "ojs":
    import ojs_bench as b
    b.setup()
    commands = [b.worker_cmd(500)] * 2
else:
    import pgqueuer_bench as b
    b.install()
    commands = [b.worker_cmd(100)] * 2
common.REPEATS = 1
r = common.bench_drain(kind, b.reset, b.enqueue_bulk, b.count_done, commands, n=n)
print(json.dumps([r["total"]["median"], r["steady"]["median"]]))
"""


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    jobs = int(os.environ.get("PEERBENCH_N", "10000"))
    missing = [str(p) for p in PYTHON.values() if not p.exists()]
    if not (HARNESS / "run.sh").exists() or missing:
        print(f"needs the harness at {HARNESS} and its venvs ({', '.join(missing)}):")
        print("run `bash ../shared/peerbench/run.sh ojs pgqueuer` once first")
        return 2
    subprocess.run(
        [PYTHON["ojs"], "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", ROOT],
        check=True,
    )
    work = Path(tempfile.mkdtemp(prefix="peers-interleaved-"))
    for item in [*HARNESS.glob("*.py"), HARNESS / "cluster.sh"]:
        shutil.copy(item, work)
    shutil.copytree(HARNESS / "ojsbench", work / "ojsbench")
    (work / "one_drain.py").write_text(ONE_DRAIN)
    subprocess.run(["bash", work / "cluster.sh", "start"], check=True)
    runs: dict[str, list[list[float]]] = {"ojs": [], "pgqueuer": []}
    try:
        for r in range(rounds):
            order = ("ojs", "pgqueuer") if r % 2 == 0 else ("pgqueuer", "ojs")
            for kind in order:
                out = subprocess.run(
                    [PYTHON[kind], "one_drain.py", kind, str(jobs)],
                    cwd=work, capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": str(work)},
                )  # fmt: skip
                runs[kind].append(json.loads(out.stdout.strip().splitlines()[-1]))
            ojs, pgq = runs["ojs"][-1], runs["pgqueuer"][-1]
            print(f"round {r}: from spawn {ojs[0]:,.0f} / {pgq[0]:,.0f} = {ojs[0] / pgq[0]:.2f}")
    finally:
        subprocess.run(["bash", work / "cluster.sh", "stop"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    spawn = {k: statistics.median(v[0] for v in runs[k]) for k in runs}
    steady = {k: statistics.median(v[1] for v in runs[k]) for k in runs}
    print(f"\n{jobs:,} jobs, {rounds} rounds, medians (jobs/s) | django-ojs | pgqueuer | ratio")
    print("|---|---|---|---|")
    for label, values in (("B drain from spawn", spawn), ("B steady", steady)):
        ratio = values["ojs"] / values["pgqueuer"]
        print(f"| {label} | {values['ojs']:,.0f} | {values['pgqueuer']:,.0f} | {ratio:.2f} |")
    ratios = [a[0] / b[0] for a, b in zip(runs["ojs"], runs["pgqueuer"], strict=True)]
    print("per-round ratios from spawn:", ", ".join(f"{x:.2f}" for x in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
