"""Seconds Snakemake takes to plan a run: ``snakemake -n`` in a run's folder, which parses the
Snakefile, validates the config, builds the DAG and evaluates every job's params, among them the
hash of the library code each job runs (pipeline_lib/codehash.py). Every ``snakemake`` call pays
this before its first job, and a finished run pays it for nothing (``snakemake -n``,
``--summary``, a rerun after an edit); the test suite makes about a hundred such calls.

    .venv/bin/python bench/dag_build.py [--directory .] [--configfile FILE ...] [--rounds 3]
        [--smoke]

``--directory``: the run's folder (default: this checkout, whose ``results/`` the default run
writes); ``--configfile``: config files over the Snakefile's (default: none, the Snakefile's
``config/config.yaml``); ``--smoke`` (CI) is ``--rounds 1``. Last line, the comparable figure:
the median wall time of the rounds and the jobs the dry run planned.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def plan_once(directory: Path, configfiles: list[Path]) -> tuple[float, int]:
    """(wall seconds, jobs planned) of one ``snakemake -n`` in ``directory``."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(directory), "-n"]
    if configfiles:
        cmd += ["--configfile", *map(str, configfiles)]
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"snakemake -n failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    total = re.search(r"^total\s+(\d+)$", proc.stdout + proc.stderr, re.M)
    return seconds, int(total.group(1)) if total else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--directory", type=Path, default=ROOT)
    ap.add_argument("--configfile", type=Path, nargs="+", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="smallest real run (CI): --rounds 1")
    a = ap.parse_args()
    rounds = 1 if a.smoke else a.rounds
    runs = [plan_once(a.directory.resolve(), [p.resolve() for p in a.configfile])
            for _ in range(rounds)]
    for i, (seconds, jobs) in enumerate(runs):
        print(f"round {i}: {seconds:.2f} s, {jobs} jobs planned")
    print(f"dag_build: {statistics.median(s for s, _ in runs):.2f} s to plan {runs[0][1]} jobs "
          f"(median of {rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
