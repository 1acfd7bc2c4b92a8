"""The orchestrator stays under test: the whole DAG plans, and `snakemake --lint` is clean."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from preset_fixtures import PRESETS, fixture_overrides, stage, write_config

from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
#: Jobs without a benchmark file of their own (Plan.rule_jobs): the report itself, the final
#: target, the local rules that fetch or check corpora on the submit host, and the stats line.
LOCAL = ("report", "all", "download_corpus", "check_ldc", "total")


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
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", planned, re.M))
    stages = ("ingest_corpus", "stanza_models", "parse_shard", "parse_corpus", "train_bpe",
              "encode_bpe", "noise_docs", "make_shards", "verify_shards", "discourse_consistency",
              "score_test", "report", "all")
    assert all(s in jobs for s in stages), planned
    # two stanza languages; 11 training jobs: the 6 registered models, the cross-task
    # pre-training and 4 control jobs (the baseline continued on the parsed pairs and on
    # documents; cross-task's chain mirrored by a Transformer trained from scratch, then
    # fine-tuned); 18 decoded systems: the 6 models, cross-task sentence by sentence, the 3
    # controls that stand beside a model, and the 4 context models with random and with empty
    # context; 6 forced decodings for CXMI, one per model
    assert (jobs["stanza_models"], jobs["train_model"], jobs["decode_test"],
            jobs["context_cxmi"]) == ("2", "11", "18", "6")
    # the report declares every other job's benchmark file: plan.rule_jobs is exactly this DAG
    plan = Plan(load_config(overrides={"results_dir": str(tmp_path / "results")}))
    assert {rule: str(len(w)) for rule, w in plan.rule_jobs().items()} == \
        {rule: n for rule, n in jobs.items() if rule not in LOCAL}


def test_missing_ldc_corpora_are_listed_before_anything_runs(tmp_path):
    cfg = tmp_path / "ldc.yaml"
    cfg.write_text(yaml.safe_dump({"downloads": {
        "ldc": {"LDC2002E18": str(tmp_path), "LDC2003E07": str(tmp_path / "absent")},
        "ldc_required": ["LDC2002E18", "LDC2003E07", "LDC2004T07"]}}))
    proc = _snakemake("-n", "--directory", str(tmp_path), "-s", str(ROOT / "Snakefile"),
                      "--configfile", str(ROOT / "config" / "config.yaml"), str(cfg))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"LDC2003E07: {tmp_path / 'absent'} is not a directory" in out, out
    assert "LDC2004T07: no directory configured (downloads.ldc.LDC2004T07)" in out, out
    assert "LDC2002E18:" not in out, out


def test_lint_is_clean():
    proc = _snakemake("--lint")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Lints for" not in out, out


# Jobs `snakemake -n` plans for each preset: each model with its matched control trained and
# decoded too, cross-task models also decoded sentence by sentence. Chen et al.: baseline,
# "with resources" (pre-training on WMT14 pairs + Gigaword documents, then fine-tuning) and
# "without" (from scratch; its control is the baseline), the pre-trained chain's control chain
# (a Transformer pre-training, then its fine-tuning) and Table 1 #4 (a Transformer with language
# tags pre-trained on both resources, then fine-tuned); in Zh-En (all licensed: one LDC check) the
# seven systems decode the five NIST test sets MT02-MT08. Zhang et al.: five NIST test sets decoded by
# the baseline, DocT and its control. Deguchi et al.: DBSA from scratch and its
# transformer_scratch control; both sides parsed in parse.shards pieces. Every context model is
# also decoded with random and with empty context on every test set (score.context_ablation):
# 2 more decodes per context model and test set, none for DBSA.
PRESET_JOBS = {   # tokenize_corpus: every corpus; train_truecaser: each truecased language
    "chen2021_en-de_ted": {"download_corpus": "2", "check_ldc": "1", "ingest_corpus": "3",
                           "tokenize_corpus": "3", "train_truecaser": "2",
                           "train_model": "8", "decode_test": "11"},
    "chen2021_en-de_news": {"download_corpus": "2", "check_ldc": "1", "ingest_corpus": "3",
                            "tokenize_corpus": "3", "train_truecaser": "2",
                            "train_model": "8", "decode_test": "11"},
    "chen2021_en-de_europarl": {"download_corpus": "2", "check_ldc": "1", "ingest_corpus": "4",
                                "tokenize_corpus": "4", "train_truecaser": "2",
                                "train_model": "8", "decode_test": "11"},
    "chen2021_zh-en": {"check_ldc": "1", "ingest_corpus": "9", "tokenize_corpus": "9",
                       "train_truecaser": None, "train_model": "8", "decode_test": "55"},
    "jiang2019_es-en_ted": {"download_corpus": "1", "ingest_corpus": "1", "tokenize_corpus": "1",
                            "train_truecaser": "2", "train_model": "3", "decode_test": "5"},
    "zhang2018_zh-en": {"check_ldc": "1", "ingest_corpus": "8", "tokenize_corpus": "8",
                        "train_truecaser": None, "train_model": "3", "decode_test": "25"},
    "deguchi2019_ja-en_aspec": {"ingest_corpus": "1", "tokenize_corpus": "1",
                                "train_truecaser": None, "stanza_models": "2",
                                "parse_shard": "128", "parse_corpus": "1", "train_model": "3",
                                "decode_test": "3"},
    "tu2018_zh-en_ted": {"download_corpus": "1", "ingest_corpus": "1", "tokenize_corpus": "1",
                         "train_truecaser": None, "train_model": "3", "decode_test": "5"},
}
#: presets with DBSA parse both sides of their training corpus; the others parse nothing
PARSING = {"deguchi2019_ja-en_aspec"}


def test_every_preset_is_planned():
    assert set(PRESET_JOBS) == set(PRESETS)


@pytest.mark.parametrize("preset", sorted(PRESET_JOBS))
def test_a_paper_preset_plans_its_own_corpora_and_models(tmp_path, preset):
    # licensed and on-request material (LDC, NIST, Gigaword, Maruf's Europarl training set) must
    # exist before the DAG is built: the fixtures in its release format stand in for it
    stage(preset, tmp_path, downloads=False)
    write_config(tmp_path, fixture_overrides(preset))
    # the Snakefile's `configfile: config/config.yaml` is read from the working directory
    (tmp_path / "config").symlink_to(ROOT / "config")
    proc = _snakemake("-n", "--quiet", "rules", "--directory", str(tmp_path), "-s",
                      str(ROOT / "Snakefile"), "--configfile", str(tmp_path / "config.yaml"),
                      "--config", f"preset={preset}")
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout + proc.stderr, re.M))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = PRESET_JOBS[preset]
    assert {k: planned.get(k) for k in jobs} == jobs, planned
    if preset not in PARSING:   # no DBSA in these setups: nothing is parsed
        assert "stanza_models" not in planned and "parse_shard" not in planned
    # the report's benchmark inputs name exactly the planned jobs
    given = yaml.safe_load((tmp_path / "config.yaml").read_text())
    plan = Plan(load_config(ROOT / "config" / "config.yaml",
                            overrides={**given, "preset": preset}))
    assert {rule: str(len(w)) for rule, w in plan.rule_jobs().items()} == \
        {rule: n for rule, n in planned.items() if rule not in LOCAL}
