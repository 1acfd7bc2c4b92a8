"""The stated decision rule (issue 34 item 5) on hand-made evidence: each of its three
conditions can fail alone, one seed is never a verdict, and the mirror image is named."""

from __future__ import annotations

import pytest

from pipeline_lib.evaluate.decision import RULE, Evidence, decide

ABOVE, SPANS, BELOW = [0.2, 1.4], [-0.3, 1.1], [-1.5, -0.1]


@pytest.mark.parametrize("evidence, verdict", [
    (Evidence(0.8, 3, True, [ABOVE, ABOVE, ABOVE]), "beats its control"),
    (Evidence(-0.8, 3, True, [BELOW, BELOW, BELOW]), "worse than its control"),
    # mean positive, test significant, one seed's document interval spans 0
    (Evidence(0.8, 3, True, [ABOVE, SPANS, ABOVE]),
     "does not beat its control: a seed's document interval of Δ includes 0"),
    # every interval above 0, but the seeds disagree too much for the t-test
    (Evidence(0.8, 3, False, [ABOVE, ABOVE, ABOVE]),
     "does not beat its control: the t-test across seeds is not significant"),
    # significant and intervals above 0 cannot go with a negative mean: still no "beats"
    (Evidence(-0.1, 3, True, [ABOVE, ABOVE, ABOVE]),
     "does not beat its control: a seed's document interval of Δ includes 0"),
    (Evidence(0.8, 3, True, [ABOVE, None, ABOVE]),
     "not decided: a seed has no document interval of Δ"),
    (Evidence(2.0, 1, True, [ABOVE]), "not decided: one seed (its bootstrap: significantly better)"),
    (Evidence(-2.0, 1, True, [BELOW]), "not decided: one seed (its bootstrap: significantly worse)"),
    (Evidence(0.3, 1, False, [SPANS]),
     "not decided: one seed (its bootstrap: no significant difference)"),
])
def test_the_rule_on_hand_made_evidence(evidence, verdict):
    assert decide(evidence) == verdict


def test_the_rule_is_stated_in_words_the_report_prints():
    assert "at least 2 seeds" in RULE and "resampling whole documents" in RULE
