"""bench/gpu_check.py's verdict on the scores of a slice with several seeds (config/converged.yaml
trains three): the rule reads the t-test across seeds, not one seed's bootstrap, and each seed's
bootstrap is listed as that seed's line (issue 34 item 6: the GPU check runs the slice with 3
seeds). CI runs the script itself at one seed (tests/integration/test_bench_smoke.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _control(delta: float, p: float, low: float) -> dict:
    return {"bleu_delta": delta, "bleu_p": p, "bleu_significant": p < 0.05,
            "bleu_delta_ci_documents": [low, low + 1.0]}


def test_the_verdict_over_seeds_reads_the_t_test_and_lists_each_seed(tmp_path):
    seeds = (1, 2, 3)
    rows = {"transformer": {"bleu": 10.0}}
    for s in seeds:
        rows[f"doct_seed{s}"] = {"bleu": 11.0 + s / 10,
                                 "control": _control(0.8 + s / 10, 0.01, 0.2)}
        rows[f"ctrl_seed{s}"] = {"bleu": 10.3}
    scores = {"test_sets": ["bible/test"], "controls": {f"doct_seed{s}": f"ctrl_seed{s}"
                                                        for s in seeds},
              "replicates": {f"{g}_seed{s}": [g, s] for g in ("doct", "ctrl") for s in seeds},
              "results": {"bible/test": {"models": rows, "seeds": {"doct": {
                  "systems": [f"doct_seed{s}" for s in seeds],
                  "control": {"group": "ctrl", "mean": 1.0, "sd": 0.1, "seeds": 3, "p": 0.004,
                              "significant": True}}}}}}
    path = tmp_path / "scores.json"
    path.write_text(json.dumps(scores))
    lines = _gpu_check().verdict({"slice": [[["python", "-m", "score", "--output", str(path)]]]})
    assert lines[1].startswith("Verdict: doct against its matched control ctrl over 3 seeds: "
                               "beats its control: mean Δ +1.00 BLEU (sd 0.1), p 0.004")
    assert [line.split(":")[0] for line in lines[2:]] == ["Seed"] * 3
    assert "doct_seed2 against its matched control ctrl_seed2: not decided: one seed" in lines[3]
    # one seed of them with an interval that includes 0: no longer "beats"
    rows["doct_seed2"]["control"]["bleu_delta_ci_documents"] = [-0.1, 0.9]
    path.write_text(json.dumps(scores))
    lines = _gpu_check().verdict({"slice": [[["python", "-m", "score", "--output", str(path)]]]})
    assert "over 3 seeds: does not beat its control: a seed's document interval of Δ includes 0" \
        in lines[1]
