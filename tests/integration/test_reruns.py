"""Reruns after data and config changes: `snakemake -n` on the completed tiny run plans exactly the
jobs that depend on what changed (rerun triggers mtime, params, input, code), nothing upstream."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_snakemake

pytestmark = pytest.mark.slow

JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)*)", re.M)


def planned(work: Path, config: dict | None = None) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job `snakemake -n` plans, optionally with another config."""
    args = ["-n"]
    if config is not None:
        (work / "changed.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        args = ["-n", "--configfile", *_configfiles(work), str(work / "changed.yaml")]
    proc = run_snakemake(work, *args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = set()
    for rule, body in JOB.findall(proc.stdout + proc.stderr):
        wc = re.search(r"^    wildcards: (.*)$", body, re.M)
        jobs.add((rule, wc.group(1) if wc else ""))
    return jobs


def _configfiles(work: Path) -> list[str]:
    return [str(ROOT / "config" / "config.yaml"), str(work / "config.yaml")]


def rules_of(jobs: set[tuple[str, str]]) -> set[str]:
    return {rule for rule, _ in jobs}


def _config(work: Path) -> dict:
    return yaml.safe_load((work / "config.yaml").read_text())


def _plan(cfg: dict):
    """The plan of the default config with the test's config over it."""
    from pipeline_lib.plan import Plan, load_config

    base = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    from snakemake.utils import update_config

    update_config(base, cfg)
    return Plan(load_config(overrides=base))


DOWNSTREAM_OF_BPE = {"train_bpe", "encode_bpe", "noise_docs", "make_shards", "train_model",
                     "decode_test", "score_test", "discourse_consistency", "report", "all"}


def test_complete_run_plans_nothing(tiny_pipeline):
    assert planned(tiny_pipeline) == set()


def test_changed_corpus_file_reruns_only_its_dependents(tiny_pipeline):
    """`extra` has only a test split: editing it reruns its ingestion, parses, encoding, noise,
    shards and decoding, then the scores and the report; not BPE (trained on train + mono
    splits only, Plan.bpe_corpora) and so no training."""
    src = tiny_pipeline / "extra.es"
    before, stat = src.read_text(), src.stat()
    try:
        src.write_text(before.replace("Hola mundo.", "Hola, mundo."))
        jobs = planned(tiny_pipeline)
    finally:  # the other tests see the completed run again
        src.write_text(before)
        os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cfg = _config(tiny_pipeline)
    systems = _plan(cfg).systems
    # its own stages (no job trains on the test-only corpus, so it is never parsed), one
    # decoding per evaluated system and the evaluation; no BPE, no training, nothing else
    own = {("ingest_corpus", "corpus=extra"), ("encode_bpe", "corpus=extra"),
           ("noise_docs", "corpus=extra"), ("make_shards", "corpus=extra"),
           ("verify_shards", "corpus=extra")}
    decoded = {("decode_test", f"model={m}, corpus=extra, split=test") for m in systems}
    evaluation = {("score_test", ""), ("discourse_consistency", ""), ("report", ""), ("all", "")}
    assert jobs == own | decoded | evaluation, sorted(jobs)
    assert len(jobs) == 9 + len(systems)   # one decoding per evaluated system


def test_changed_vocab_size_reruns_bpe_and_after_but_not_parsing(tiny_pipeline):
    cfg = _config(tiny_pipeline)
    cfg["bpe"]["vocab_size"] += 20
    rules = rules_of(planned(tiny_pipeline, cfg))
    assert DOWNSTREAM_OF_BPE <= rules
    assert not rules & {"ingest_corpus", "stanza_models", "parse_shard", "parse_corpus"}, rules


def test_changed_training_setting_reruns_training_and_after_only(tiny_pipeline):
    cfg = _config(tiny_pipeline)
    cfg["train"]["lr"] = 5.0e-4
    jobs = planned(tiny_pipeline, cfg)
    assert rules_of(jobs) == {"train_model", "decode_test", "score_test",
                              "discourse_consistency", "report", "all"}
    trained = {wc for r, wc in jobs if r == "train_model"}
    plan = _plan(cfg)
    # every job of every chain: the models, cross-task's pre-training and each control's links
    # (cross-task's control is a Transformer from scratch, then continued: two jobs)
    assert set(plan.controls.values()) < set(plan.jobs)
    assert trained == {f"model={m}" for m in plan.jobs}
    assert {"model=transformer", "model=dbsa", "model=doct", "model=cache", "model=camn",
            "model=crosstask_pretrain", "model=crosstask"} < trained


def test_one_models_setting_reruns_only_that_model(tiny_pipeline):
    cfg = _config(tiny_pipeline)
    cfg["model_settings"]["doct"]["train"]["lr"] = 5.0e-4
    jobs = planned(tiny_pipeline, cfg)
    # doct and its matched control (the baseline continued with doct's schedule) only
    control = _plan(cfg).controls["doct"]
    assert {wc for r, wc in jobs if r == "train_model"} == {"model=doct", f"model={control}"}
    assert {wc.split(",")[0] for r, wc in jobs if r == "decode_test"} == {"model=doct",
                                                                          f"model={control}"}
    assert rules_of(jobs) == {"train_model", "decode_test", "score_test",
                              "discourse_consistency", "report", "all"}
