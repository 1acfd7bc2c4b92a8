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
