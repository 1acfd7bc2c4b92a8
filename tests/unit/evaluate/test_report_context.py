"""The report's table of context controls in BLEU (issue 34 items 2-3): each context model
against its random-context twin and its decodings with random and empty context."""

from __future__ import annotations

from pipeline_lib.evaluate.report.context_use import context_bleu_table
from pipeline_lib.evaluate.report.document import NA


def test_each_context_model_gets_one_row_per_test_set_with_its_deltas():
    twin = {"bleu_delta": 1.2, "bleu_p": 0.01, "bleu_delta_ci_documents": [0.3, 2.1]}
    ablated = {"bleu_delta": -0.4, "bleu_p": 0.2, "bleu_delta_ci_documents": None}
    scores = {"test_sets": ["c/test", "d/test"],
              "against": [["doct", "doct_random_context", "twin"],
                          ["doct", "doct_ctx_random", "ctx_random"]],
              "results": {ts: {"models": {"doct": {"bleu": 12.3, "against": {
                  "twin": twin, "ctx_random": ablated}}}} for ts in ("c/test", "d/test")}}
    t = context_bleu_table(scores)
    assert t.rows[0] == ["doct", "c/test", "12.30", "+1.20 [+0.30, +2.10], p 0.01",
                         "-0.40, p 0.2", NA]
    assert [r[1] for r in t.rows] == ["c/test", "d/test"]
    assert "random-context twin" in t.header[3] and "empty context" in t.header[5]
    assert context_bleu_table({**scores, "against": []}) is None


def _t(deltas, p, significant):
    return {"deltas": deltas, "mean": round(sum(deltas) / len(deltas), 2), "sd": 0.1, "p": p,
            "significant": significant}


def _cxmi(empty_lo: float, random_lo: float) -> dict:
    return {"sentences": 9, "reads_context": True, "contrasts": {
        "true_vs_empty": {"nats_per_sentence": 0.1, "ci_documents": [empty_lo, 0.2]},
        "true_vs_random": {"nats_per_sentence": 0.05, "ci_documents": [random_lo, 0.1]}}}


def test_across_seeds_the_cxmi_rule_must_hold_in_every_seed():
    """Issue 34 item 5: 'uses its context' across seeds needs CXMI's rule in every seed; the
    Δ against each context control is tested across seeds (score.py across_seeds)."""
    from pipeline_lib.evaluate.report.context_use import context_seeds_table

    systems = {"doct": ["doct_seed1", "doct_seed2"], "camn": ["camn_seed1", "camn_seed2"]}
    seeds = {g: {"seeds": [1, 2], "systems": ms, "against": {
        "twin": _t([0.5, 0.3], 0.04, True), "ctx_random": _t([-0.1, 0.2], 0.7, False)}}
        for g, ms in systems.items()}
    seeds["transformer_plus150_doc"] = {"seeds": [1, 2], "systems": ["c1", "c2"]}
    scores = {"test_sets": ["c/test"], "results": {"c/test": {"seeds": seeds}}}
    cxmi = {"doct_seed1": [("c/test", _cxmi(0.01, 0.02))],
            "doct_seed2": [("c/test", _cxmi(0.01, 0.02))],
            "camn_seed1": [("c/test", _cxmi(0.01, 0.02))],
            "camn_seed2": [("c/test", _cxmi(0.01, -0.01))]}
    t = context_seeds_table(scores, cxmi)
    assert [r[:4] for r in t.rows] == [
        ["doct", "c/test", "1, 2", "uses its context in every seed"],
        ["camn", "c/test", "1, 2", "no: uses its context in 1 of 2 seeds"]]
    assert t.rows[0][4] == "+0.40 ± 0.10 (+0.50, +0.30), p 0.04†"
    assert t.rows[0][5] == "+0.05 ± 0.10 (-0.10, +0.20), p 0.7" and t.rows[0][6] == NA
    stream = {"sentences": 9, "not_measured": "stream mode"}     # the cache: no CXMI
    seeds["cache"] = {**seeds["doct"], "systems": ["cache_seed1", "cache_seed2"]}
    cxmi.update({f"cache_seed{s}": [("c/test", stream)] for s in (1, 2)})
    assert context_seeds_table(scores, cxmi).rows[2][3] == "not measured by CXMI"
    del cxmi["camn_seed2"]
    assert context_seeds_table(scores, cxmi).rows[1][3] == "not decided: a seed has no CXMI"
    one_seed = {"test_sets": ["c/test"], "results": {"c/test": {"models": {}}}}
    assert context_seeds_table(one_seed, cxmi) is None
