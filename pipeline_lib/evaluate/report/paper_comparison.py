"""The paper's test BLEU of each job beside ours in the same metric (issue 37, item 2): the
figures and which of our scores is the paper's metric come from the preset's paper table
(``config/presets/paper/<preset>.yaml``, section ``bleu``), so that a reader puts our number
beside the paper's, not sacreBLEU's detokenized BLEU beside multi-bleu.perl's."""

from __future__ import annotations

from pipeline_lib.evaluate.report.document import NA, Table


def paper_table(scores: dict | None, paper: dict | None) -> Table | None:
    """Job, the paper's figure, ours on ``paper["test_set"]`` in ``paper["score"]``, their
    difference, and the paper's source; None without a preset's figures."""
    if not paper or scores is None:
        return None
    key, test_set = paper["score"], paper["test_set"]
    models = scores["results"].get(test_set, {}).get("models", {})
    t = Table("Paper comparison", ["Job", "Paper", f"Ours ({test_set})", "Ours − paper",
                                   "Paper's figure"])
    signature = None
    for job, figure in paper["figures"].items():
        ours = models.get(job, {}).get(key)
        signature = signature or models.get(job, {}).get(f"{key}_signature")
        t.rows.append([job, f"{figure['value']:.2f}", NA if ours is None else f"{ours:.2f}",
                       NA if ours is None else f"{ours - figure['value']:+.2f}",
                       figure["source"]])
    t.notes.append(f"Ours: `{key}` of scores.json on {test_set}, the metric the paper reports "
                   f"(the preset's paper table; {NA}: not scored in this run). Signature: "
                   f"{signature or NA}.")
    t.notes.append("A run at smoke size, on other data, or stopped before its plateau is a "
                   "budget, not a replication: only a run trained to a plateau on the paper's "
                   "data is put beside the paper (the Verdict section says which regime this is).")
    return t
