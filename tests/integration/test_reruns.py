"""Reruns after data and config changes: `snakemake -n` on the completed tiny run plans exactly the
jobs that depend on what changed (rerun triggers mtime, params, input, code), nothing upstream."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, run_snakemake

# the tiny run is shared by every xdist worker (conftest.py) and one test edits a corpus file in
# it: they run one after another on one worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiny_pipeline_edits")]

JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):\n((?:    .*\n)*)", re.M)


def planned(work: Path, config: dict | None = None) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job `snakemake -n` plans, optionally with another config."""
    args = ["-n"]
    if config is not None:
        # a file of this call's own: under -n 3 a test once planned with another test's
        # changed config from a shared changed.yaml (bench/RESULTS.md, the test suite)
        changed = work / f"changed-{uuid.uuid4().hex}.yaml"
        changed.write_text(yaml.safe_dump(config, sort_keys=False))
        args = ["-n", "--configfile", *_configfiles(work), str(changed)]
    try:
        proc = run_snakemake(work, *args, timeout=300)
    finally:
        if config is not None:
            changed.unlink()
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
    from pipeline_lib.plan import Plan
    from pipeline_lib.run_config import load_config

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
    # the tiny run scores context use (score.context_ablation): each model on the test set
    cxmi = {("context_cxmi", f"model={m}, corpus=extra, split=test")
            for m in _plan(cfg).models}
    evaluation = {("score_test", ""), ("discourse_consistency", ""), ("report", ""), ("all", "")}
    assert jobs == own | decoded | cxmi | evaluation, sorted(jobs)
    assert len(jobs) == 9 + len(systems) + len(cxmi)   # one decoding per evaluated system


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
    assert rules_of(jobs) == {"train_model", "decode_test", "context_cxmi", "score_test",
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
    # doct, its matched control (the baseline continued with doct's schedule) and its
    # random-context twin (doct's job with other documents' context) only; doct's decodings
    # with ablated context decode the retrained doct
    plan = _plan(cfg)
    control, twin = plan.controls["doct"], plan.twins["doct"]
    trained = {"model=doct", f"model={control}", f"model={twin}"}
    assert {wc for r, wc in jobs if r == "train_model"} == trained
    assert {wc.split(",")[0] for r, wc in jobs if r == "decode_test"} == trained | {
        "model=doct_ctx_random", "model=doct_ctx_empty"}
    assert {wc.split(",")[0] for r, wc in jobs if r == "context_cxmi"} == {"model=doct"}
    assert rules_of(jobs) == {"train_model", "decode_test", "context_cxmi", "score_test",
                              "discourse_consistency", "report", "all"}


# --- code changes and a moved checkout: a copy of the code and of the finished run, elsewhere

CODE = ("Snakefile", "workflow", "pipeline_lib", "config", "third_party")


@pytest.fixture
def moved(tiny_pipeline, tmp_path) -> tuple[Path, Path]:
    """(checkout, run): copies of this checkout's code and of the finished tiny run, each in
    another folder (``copy2`` keeps the files' times, as ``cp -a`` or ``rsync -a`` do)."""
    root, work = tmp_path / "checkout", tmp_path / "run"
    for name in CODE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            root.mkdir(exist_ok=True)
            shutil.copy2(src, root / name)
    shutil.copytree(tiny_pipeline, work, symlinks=True)
    return root, work


def planned_in(root: Path, work: Path) -> set[tuple[str, str]]:
    proc = run_snakemake(work, "-n", timeout=300, root=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {(rule, (m.group(1) if (m := re.search(r"^    wildcards: (.*)$", body, re.M)) else ""))
            for rule, body in JOB.findall(proc.stdout + proc.stderr)}


def _edit(root: Path, module: str) -> None:
    """A comment appended to ``pipeline_lib/<module>``: new code, same behaviour."""
    with open(root / "pipeline_lib" / module, "a") as f:
        f.write("\n# edited by tests/integration/test_reruns.py\n")


EVALUATION = {("score_test", ""), ("discourse_consistency", ""), ("report", ""), ("all", "")}


def _decodings(work: Path, *systems: str) -> set[tuple[str, str]]:
    cfg = _config(work)
    return {("decode_test", f"model={m}, corpus={c}, split=test")
            for m in systems for c in cfg["corpora"]}


def _cxmi(work: Path, *models: str) -> set[tuple[str, str]]:
    cfg = _config(work)
    return {("context_cxmi", f"model={m}, corpus={c}, split=test")
            for m in models for c in cfg["corpora"]}


def test_moved_checkout_and_run_plan_nothing(moved):
    """No rule parameter holds a path of the checkout (the UD treebanks count by content)."""
    assert planned_in(*moved) == set()


def test_edited_model_reruns_its_chain_only(moved):
    """models/cache.py: the cache job and its random-context twin (the same model), their
    decodings, the cache's ablated decodings and the evaluation; not the baseline, the other
    models or the controls (each training job hashes its own model's module)."""
    root, work = moved
    _edit(root, "models/cache.py")
    assert planned_in(root, work) == ({("train_model", "model=cache"),
                                       ("train_model", "model=cache_random_context")}
                                      | _decodings(work, "cache", "cache_random_context",
                                                   "cache_ctx_random", "cache_ctx_empty")
                                      | _cxmi(work, "cache") | EVALUATION)


def test_edited_reader_reruns_its_corpora_only(moved):
    """ingest/plaintext.py: the ingestion of `extra` (reader plaintext) and what reads it, as if
    its file had changed; not the Bible's (reader bible), so no BPE and no training."""
    root, work = moved
    _edit(root, "ingest/plaintext.py")
    jobs = planned_in(root, work)
    assert ("ingest_corpus", "corpus=extra") in jobs
    assert not {r for r, wc in jobs if "bible" in wc or r in ("train_bpe", "train_model")}, jobs


def test_edited_transformer_core_retrains_every_job(moved):
    """models/transformer.py is every model's core: every training job (controls included) and
    every decoding, nothing before training."""
    root, work = moved
    _edit(root, "models/transformer.py")
    jobs = planned_in(root, work)
    plan = _plan(_config(work))
    assert {wc for r, wc in jobs if r == "train_model"} == {f"model={j}" for j in plan.jobs}
    assert rules_of(jobs) == {"train_model", "decode_test", "context_cxmi", "score_test",
                              "discourse_consistency", "report", "all"}


def test_edited_score_marks_rescore_and_report_only(moved):
    """evaluate/score.py holds what constants.py once held for scoring (the test sets, the
    significance mark): an edit reruns the scoring and the report that prints its marks, no
    training, decoding or discourse job (a grab-bag module in every hash retrained all)."""
    root, work = moved
    _edit(root, "evaluate/score.py")
    assert planned_in(root, work) == {("score_test", ""), ("report", ""), ("all", "")}
