"""The orchestrator stays under test: the whole DAG plans, and `snakemake --lint` is clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_dry_run_plans_every_stage_of_the_default_pipeline(tmp_path):
    proc = _snakemake("-n", "--quiet", "rules", "--directory", str(ROOT),
                      "--config", f"results_dir={tmp_path / 'results'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    planned = proc.stdout + proc.stderr
    for rule in ("ingest_corpus", "all"):
        assert rule in planned, planned


def test_lint_is_clean():
    proc = _snakemake("--lint")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Lints for" not in out, out
