"""The stated decision rule: when a model "beats its control", read off the scores.

WHY one rule, written once: a verdict that says "beats" on a single run's bootstrap p measures
the test sentences' noise, not the training's (Clark et al. 2011): a model and its control of one
seed differ by how that seed initialised and ordered both, which a bootstrap over test
sentences cannot see. The report's verdict table (evaluate/report/verdict.py) and the GPU
check's summary (bench/gpu_check.py) both apply :func:`decide`, so they cannot disagree.

The rule (issue 34): a model beats its matched control where

1. the mean Δ BLEU over seeds (model minus control, each seed against its own control) is
   positive,
2. the paired t-test of the per-seed Δ across at least 2 seeds is significant, and
3. every seed's 95 % paired-bootstrap interval of Δ that resamples whole documents
   (score.py's ``bleu_delta_ci_documents``) lies above 0.

The mirror image is "worse than its control". With one seed no test across seeds exists, so
there is no verdict, only what that seed's bootstrap says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

RULE = ("Rule: a model beats its matched control where the mean Δ BLEU over seeds is positive, "
        "the paired t-test of the per-seed Δ across at least 2 seeds is significant, and every "
        "seed's 95 % paired-bootstrap interval of Δ resampling whole documents lies above 0 "
        "(the mirror image: worse than its control). One seed: no verdict, only what its "
        "bootstrap says.")


@dataclass(frozen=True)
class Evidence:
    """What the scores say of one model against its control."""

    mean: float                                  # Δ BLEU; with several seeds their mean
    seeds: int
    significant: bool                            # the t-test across seeds; one seed: bootstrap
    intervals: Sequence[Sequence[float] | None]  # each seed's document interval of Δ


def decide(e: Evidence) -> str:
    """The verdict under :data:`RULE`, with the condition that failed."""
    if e.seeds < 2:
        said = ("significantly better" if e.significant and e.mean > 0 else
                "significantly worse" if e.significant and e.mean < 0 else
                "no significant difference")
        return f"not decided: one seed (its bootstrap: {said})"
    if any(i is None for i in e.intervals):
        return "not decided: a seed has no document interval of Δ"
    if e.significant and e.mean > 0 and all(i[0] > 0 for i in e.intervals):
        return "beats its control"
    if e.significant and e.mean < 0 and all(i[1] < 0 for i in e.intervals):
        return "worse than its control"
    failed = ("the t-test across seeds is not significant" if not e.significant else
              "a seed's document interval of Δ includes 0")
    return f"does not beat its control: {failed}"
