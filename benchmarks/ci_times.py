"""How long the tests take: CI (``.ci/run``) on a clean clone, stage by stage, and each tier's pytest wall time.

A clean clone of the repository's HEAD is made in a temporary directory and ``bash .ci/run`` runs there, as
CI runs it: a fresh venv, the install, ruff and the fast tier (the README's test command), then the slow
tier. ``.ci/run`` prints each stage's wall time (``ci: <stage> took Ns``); pytest prints its own wall time
per tier (``N passed ... in S s``). Targets (issue 54): the fast tier at most 5 minutes of pytest wall time,
the whole ``.ci/run`` at most 20 minutes.

    python benchmarks/ci_times.py [--record] [--keep]

``--record`` writes the figures to benchmarks/results/ci_times.json (docs/benchmarks.md quotes them);
``--keep`` leaves the clone and the full log in place and prints where.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ci_times.json"
STAGE = re.compile(r"^ci: (.+) took (\d+)s$")
PYTEST = re.compile(r"^=+ (.*?) in ([\d.]+)s(?: \(.*\))? =+$")


def parse(log: str) -> dict:
    """The stage times and each pytest session's summary (the fast tier first, then the slow)."""
    stages = {m.group(1): int(m.group(2)) for m in map(STAGE.match, log.splitlines()) if m}
    sessions = [{"summary": m.group(1), "pytest_s": float(m.group(2))}
                for m in map(PYTEST.match, log.splitlines()) if m and ("passed" in m.group(1) or "failed" in m.group(1))]
    tiers = dict(zip(("fast", "slow"), sessions))
    return {"stages_s": stages, "total_s": sum(stages.values()), "tiers": tiers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/ci_times.json")
    ap.add_argument("--keep", action="store_true", help="keep the clone and the log")
    args = ap.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="ci-times-"))
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    log_path = work / "ci.log"
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")})
        for line in proc.stdout:
            log.write(line)
            if STAGE.match(line.strip()) or PYTEST.match(line.strip()):
                print(line.rstrip(), flush=True)
        code = proc.wait()
    wall = time.monotonic() - start
    figures = {"commit": head, "rc": code, "wall_s": round(wall), **parse(log_path.read_text()),
               "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
               "machine": platform.machine(), "command": "python benchmarks/ci_times.py --record"}
    print(json.dumps(figures, indent=1))
    if args.record:
        RESULTS.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"wrote {RESULTS}")
    if args.keep:
        print(f"clone and log kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
