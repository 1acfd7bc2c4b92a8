"""Seconds the ``score_test`` stage takes on a finished run's test hypotheses: every metric,
the paired bootstrap and the tests against matched controls, as the rule runs it, with one
process and with ``--workers`` processes for TER's edit statistics
(pipeline_lib/evaluate/cached_ter.py). Scoring is the last job of a run, so its time is added
to the run's wall time whole.

    .venv/bin/python bench/score_throughput.py [--directory .] [--configfile FILE ...]
        [--workers 2] [--smoke]

``--directory``: the run's folder (default: this checkout, whose ``results/`` the default run
writes); ``--configfile``: config files of that run (default: ``config/config.yaml``);
``--smoke`` (CI): 20 bootstrap samples. Last line, the comparable figure: seconds with 1 and
with N processes (their scores must be identical, or it fails).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline_lib.evaluate import score  # noqa: E402
from pipeline_lib.plan import Plan  # noqa: E402
from pipeline_lib.run_config import load_config  # noqa: E402


def score_once(plan: Plan, workers: int, samples: int | None, out: Path) -> float:
    """Wall seconds of score.main on the plan's hypotheses, as rule score_test calls it."""
    options = plan.options("score_test")
    argv = [*shlex.split(plan.test_set_args()), "--options", options, "--threads",
            str(workers), "--output", str(out / f"scores{workers}.json")]
    if samples:
        argv += ["--bootstrap-samples", str(samples)]
    start = time.perf_counter()
    if score.main(argv) != 0:
        raise SystemExit(f"score_test failed with {workers} process(es)")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--directory", type=Path, default=ROOT)
    ap.add_argument("--configfile", type=Path, nargs="+", default=[ROOT / "config" / "config.yaml"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="20 bootstrap samples (CI)")
    a = ap.parse_args()
    plan = Plan(load_config(*a.configfile))
    os.chdir(a.directory)
    files = len(plan.hypotheses())
    with tempfile.TemporaryDirectory() as tmp:
        one = score_once(plan, 1, 20 if a.smoke else None, Path(tmp))
        many = score_once(plan, a.workers, 20 if a.smoke else None, Path(tmp))
        same = (Path(tmp) / "scores1.json").read_text() == \
            (Path(tmp) / f"scores{a.workers}.json").read_text()
    if not same:
        raise SystemExit("the scores differ between 1 and N processes")
    print(f"score_throughput: {files} hypothesis files scored in {one:.1f} s with 1 process, "
          f"{many:.1f} s with {a.workers}")


if __name__ == "__main__":
    main()
