"""The run profiles: config/converged.yaml (every job to its dev plateau) and config/gpu.yaml
(the converged profile on one GPU) plan with `snakemake -n` (CI does not run them), `make`
starts them with their config files, and a 2-update version of the converged regime with two
seeds runs end to end (`snakemake --cores 2`): one baseline, every fine-tune and control per
seed, each stopped by the rule, scored per seed and across seeds, the report opening with its
verdict."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_snakemake

from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config

PROFILES = {"converged": ["converged.yaml"], "gpu": ["converged.yaml", "gpu.yaml"]}


def _dry_run(work: Path, files: list[str]) -> dict[str, str]:
    (work / "config").symlink_to(ROOT / "config")
    proc = run_snakemake(work, "-n", "--quiet", "rules", "--configfile",
                         str(ROOT / "config" / "config.yaml"),
                         *(str(ROOT / "config" / f) for f in files), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout + proc.stderr, re.M))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_plans(tmp_path, profile):
    """Issue 34 item 1: every model has a control of its own that trains exactly the model's
    updates after it. Both add every context model's random-context twin (a training and a
    decode each: DocT, CAMN, the cache, and on the GPU cross-task) and its decodings with random
    and empty context (two decodes each; items 2-3), and repeat the fine-tune stage over three
    seeds from one baseline (item 5). GPU: every registered model with its control; cross-task's
    chain gets two (its pre-training's, its fine-tune's); trained once from scratch: the
    baseline, cross-task's pre-training and its control; per seed 14 trainings and 23 decoded
    systems (the pre-training's control is not evaluated). Converged on CPU: cross-task left
    out (config/converged.yaml), so per seed four fine-tunes, their four controls and three
    twins, 17 decoded systems."""
    jobs = _dry_run(tmp_path, PROFILES[profile])
    n, systems = ((3 + 3 * 14, 1 + 3 * 23) if profile == "gpu" else (1 + 3 * 11, 1 + 3 * 17))
    assert (jobs["train_model"], jobs["decode_test"], jobs["report"]) == \
        (str(n), str(systems), "1"), jobs
    plan = Plan(load_config(ROOT / "config" / "config.yaml",
                            *(ROOT / "config" / f for f in PROFILES[profile])))
    assert plan.results.root == f"results/{profile}"
    assert all(j.train["patience"] > 0 for j in plan.jobs.values() if not j.budget_of)
    assert all(j.train["patience"] == 0 for j in plan.jobs.values() if j.budget_of)
    if profile == "gpu":
        assert {j.train["device"] for j in plan.jobs.values()} == {"cuda"}
        # the base size in pre-norm: what fixed the post-norm stack's NLL/BLEU gap (RESULTS.md)
        assert {(j.model["d_model"], j.model["norm_first"]) for j in plan.jobs.values()} == \
            {(512, True)}
        assert plan.config["cluster"]["gpus_per_node"] == 1


def test_smoke_seeds_plans_three_seeds_of_the_fine_tune_stage(tmp_path):
    """config/smoke_seeds.yaml (the row of bench/RESULTS.md that applies the decision rule to
    three seeds at smoke budgets): one baseline; per seed DocT, the cache, CAMN, their one
    control (fixed budgets: the same updates for all three) and three twins; each context
    model, control and twin decoded, the context models also with random and empty context;
    CXMI for the baseline (0 by construction) and each seed's three context models."""
    jobs = _dry_run(tmp_path, ["smoke_seeds.yaml"])
    assert (jobs["train_model"], jobs["decode_test"], jobs["context_cxmi"]) == \
        (str(1 + 3 * 7), str(1 + 3 * 13), str(1 + 3 * 3)), jobs
    plan = Plan(load_config(ROOT / "config" / "config.yaml", ROOT / "config" / "smoke_seeds.yaml"))
    assert plan.results.root == "results/smoke_seeds"
    assert all(j.train["patience"] == 0 for j in plan.jobs.values())


@pytest.mark.parametrize("target, files", [("reproduce-seeds", ["smoke_seeds.yaml"]),
                                           ("reproduce-converged", ["converged.yaml"]),
                                           ("reproduce-gpu", ["converged.yaml", "gpu.yaml"])])
def test_make_targets_start_the_profiles(target, files):
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    configs = " ".join(f"config/{f}" for f in ["config.yaml", *files])
    assert f"--configfile {configs}" in out, out


@pytest.mark.slow
def test_two_updates_of_the_stop_rule_with_two_seeds_end_to_end(tmp_path, shared_dir):
    """The converged regime in two updates: every job validates after each update and a
    min_delta no gain reaches ends it on a plateau at update 2 (cap 5); seeds [1, 2] repeat
    DocT and DocT's control from one baseline."""
    rule = {"patience": 1, "min_delta": 100.0, "validate_every": 1, "save_every": 1,
            "log_every": 1, "warmup": 2, "max_steps": 5}
    cfg = {
        "results_dir": "results", "resources_dir": str(tmp_path / "resources"),
        "shared_dir": str(shared_dir), "seeds": [1, 2], "models": ["transformer", "doct"],
        "corpora": {"bible": {"reader": "bible", "max_chapters": 12, "dev_books": ["Obadiah"],
                              "test_books": ["Jude"]}},
        "bpe": {"vocab_size": 300},
        "model_sizes": {"tiny": {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1,
                                   "dec_layers": 1}},
        "train": {**rule, "max_tokens": 512, "dev_bleu": False},
        "model_settings": {"transformer": {"train": dict(rule)}, "doct": {"train": dict(rule)}},
        "decode": {"beam": 1, "max_len_b": 3}, "score": {"bootstrap_samples": 20},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = run_snakemake(tmp_path, "--cores", "2", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = tmp_path / "results"
    plan = Plan(load_config(ROOT / "config" / "config.yaml", tmp_path / "config.yaml"))
    # one baseline (from scratch), the fine-tune stage per seed (seed_scope fine_tune)
    assert sorted(plan.jobs) == sorted(["transformer"] + [
        f"{j}_seed{s}" for s in (1, 2) for j in ("doct", "transformer_plus_matched_doct")])
    for job in plan.jobs.values():
        man = json.loads((results / "train_model" / job.name / "manifest.json").read_text())
        # issue 34 item 1: the control trains exactly DocT's updates, after it, rule off
        reason = "max_steps" if job.budget_of else "plateau"
        assert (man["stop"]["reason"], man["stop"]["updates"]) == (reason, 2), job.name
        assert man["counts"]["steps"] == 2 and man["determinism"]["seed"] == job.train["seed"]
        assert man["params"]["train"]["init_from"] == job.train["init_from"]
        if job.budget_of:
            assert man["params"]["train"]["matched_to"].endswith(
                f"train_model/{job.budget_of}/manifest.json")
            assert man["params"]["train"]["patience"] == 0
    scores = json.loads((results / "score_test" / "scores.json").read_text())
    assert scores["replicates"]["doct_seed2"] == ["doct", 2]
    across = scores["results"]["bible/test"]["seeds"]["doct"]
    assert across["seeds"] == [1, 2] and across["control"]["group"] == "transformer_plus_matched_doct"
    md = (results / "report" / "report.md").read_text()
    verdict = md.split("## Verdict\n")[1].split("\n## ")[0]
    assert md.split("\n## ")[1].startswith("Verdict") and "Regime: converged." in verdict
    row = next(r for r in verdict.splitlines() if r.startswith("| doct |"))
    assert "(paired t-test across seeds)" in row and "plateau @ 2" in row
    assert "### Across seeds" in md
