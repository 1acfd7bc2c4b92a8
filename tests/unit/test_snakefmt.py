"""The Snakefile and the rule files are as snakefmt writes them (issue 35 item 7): the
formatting the Snakemake workflow catalog checks, run here so that CI fails on a rule file left
unformatted. snakefmt and black are pinned in pyproject.toml (test extras), since their output
moves with their versions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rule_files_are_snakefmt_clean():
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    proc = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "--diff",
                           *map(str, files)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (f"run `snakefmt Snakefile workflow/rules/`:\n"
                                  f"{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
