"""Every paper preset end to end at smoke size: the real Snakefile with `--config preset=<name>`
on small files in each corpus's release format (tests/preset_fixtures.py), every stage from
ingestion to the report, with `snakemake --cores 2`.

What a preset carries is what runs: its corpora and readers (IWSLT tags/XML, Maruf et al. `<d>`
documents, WMT14 sentence pairs, gzipped Gigaword SGML, LDC/NIST SGML with four references, GB
-encoded MTC SGML and GALE TDF in one union corpus, ASPEC's ` ||| ` files), stanza models trained
offline and both sides parsed where DBSA trains on heads, its
models and training chains (cross-task pre-training on another corpus's pairs and a monolingual
corpus's restoration instances, two-step recipes) and their matched controls; only the sizes
(model, steps, BPE, beam) are overridden."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import run_snakemake
from preset_fixtures import (PRESETS, fixture_overrides, merged, smoke_overrides, stage,
                             write_config)

from pipeline_lib.plan import Plan
from pipeline_lib.run_config import load_config

pytestmark = pytest.mark.slow


def _failed_logs(work: Path) -> str:
    """Tails of the rule logs that report an error (shown when the run fails)."""
    logs = sorted((work / "logs").rglob("*.log")) if (work / "logs").is_dir() else []
    return "".join(f"\n== {p}\n{p.read_text()[-3000:]}" for p in logs
                   if "Traceback" in p.read_text() or "ERROR" in p.read_text())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_runs_end_to_end_on_its_release_formats(tmp_path, monkeypatch, name):
    monkeypatch.delenv("DOCMT_SHARED", raising=False)   # the staged shared/ (UD_Japanese-smoke)
    stage(name, tmp_path, downloads=True)
    config = merged(fixture_overrides(name), smoke_overrides(name))
    write_config(tmp_path, config)
    proc = run_snakemake(tmp_path, "--cores", "2", preset=name, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:] + _failed_logs(tmp_path)

    plan = Plan(load_config(overrides={"preset": name, **config}))
    results = tmp_path / plan.results.root     # results/<preset>: each preset its own folder
    assert plan.results.root == f"results/{name}"
    # nothing was fetched: every download was a staged fixture
    assert not (tmp_path / "resources" / "downloads").exists()
    # every corpus was read from its release format and kept sentences in each of its splits
    for corpus, spec in plan.config["corpora"].items():
        man = json.loads((results / "ingest_corpus" / corpus / "manifest.json").read_text())
        assert set(man["counts"]["sentences"]) == plan.splits(corpus), corpus
    # NIST test sets keep their four references (reader sgml: one <refset> per fixture file)
    for corpus, spec in plan.config["corpora"].items():
        if spec["reader"] == "sgml":
            refs = {len(t) for t in pq.read_table(results / "ingest_corpus" / corpus / "docs.parquet",
                                                  columns=["tgt"]).column("tgt").to_pylist()}
            assert refs == {len(next(iter(spec["splits"].values()))["tgt"])} == {4}, corpus
    # every job of the preset's chains, and every matched control, was trained as planned
    for job in plan.jobs.values():
        man = json.loads((results / "train_model" / job.name / "manifest.json").read_text())
        assert man["counts"]["steps"] == job.train["max_steps"], job.name
        shards = f"{plan.shard_root(job.corpus, job.data)}/{plan.shard_task(job.data)}/train"
        assert any(p.endswith(shards.split("results/", 1)[-1]) for p in man["inputs"]), \
            (job.name, shards, man["inputs"])
    # DBSA's parse supervision reached training: both sides parsed (stanza models trained
    # offline, Japanese on the UD_Japanese-smoke fixture) and supervised tokens counted
    for job in plan.jobs.values():
        if job.data == "heads" and job.model["name"] == "dbsa":   # its control reads no heads
            sup = json.loads((results / "train_model" / job.name / "manifest.json").read_text())
            assert sup["counts"]["supervision"]["src_heads"] > 0, job.name
            assert sup["counts"]["supervision"]["tgt_heads"] > 0, job.name
    # the report has a row for every model, cross-task sentence decoding and every control
    lines = (results / "report" / "report.md").read_text().splitlines()
    rows = {line.split("|")[1].strip().split(" ")[0] for line in lines if line.startswith("| ")}
    assert set(plan.systems) <= rows, (sorted(plan.systems), sorted(rows))
    assert set(plan.controls.values()) <= set(plan.systems)
    # issue 26 item 5: the budget table shows what ran, each job with its schedule (peak lr,
    # warm-up, max_steps: the preset's, max_steps and warm-up at smoke size) and stop rule and
    # reason, the pre-training jobs no system is included
    budgets = (results / "report" / "report.md").read_text().split("\n### Budgets", 1)[1]
    budgets = budgets.split("\n#", 1)[0].splitlines()
    budget = [[c.strip() for c in line.strip().strip("|").split("|")]
              for line in budgets if line.startswith("| ")]
    head = budget[0]
    budget = {row[2]: dict(zip(head, row)) for row in budget[1:]}   # by training job
    assert set(budget) == set(plan.jobs), (sorted(budget), sorted(plan.jobs))
    for job in plan.jobs.values():
        t, row = job.train, budget[job.name]
        rule = "fixed" if not t["patience"] else \
            f"plateau: dev {t['stop_metric']}, patience {t['patience']}"
        assert (row["LR"], row["Warm-up"], row["Max steps"], row["Stop rule"], row["Stopped"]) \
            == (f"{t['lr']:.3g}", f"{t['warmup']:,}", f"{t['max_steps']:,}", rule,
                f"max_steps @ {t['max_steps']:,}"), (job.name, row)
    scores = json.loads((results / "score_test" / "scores.json").read_text())
    assert scores["controls"] == {s: c for s in plan.systems if (c := plan.control_of(s))}
    # issue 37: the paper's tokenization ran before BPE (every preset sets one), the
    # checkpoints carry its truecasers, and the paper's BLEU stands beside its figures
    assert plan.tokenize, name
    bpe = json.loads((results / "train_bpe" / "manifest.json").read_text())
    assert all("/tokenize_corpus/" in p for p in bpe["inputs"]), bpe["inputs"]
    for corpus in plan.config["corpora"]:
        tok = json.loads((results / "tokenize_corpus" / corpus / "manifest.json").read_text())
        assert tok["counts"]["rows"] > 0, corpus
    for job in plan.jobs:
        final = results / "train_model" / job / "checkpoints" / "final"
        assert {f"truecase.{lang}.model" for lang in plan.truecased} <= \
            {p.name for p in final.iterdir()}, job
    if plan.config["score"]["tokenized_bleu"]:
        for test_set in scores["test_sets"]:
            assert all("tokenized_bleu" in row
                       for row in scores["results"][test_set]["models"].values()), test_set
    report = (results / "report" / "report.md").read_text()
    assert ("### Paper comparison" in report) == bool(plan.paper_bleu), name
    for corpus in plan.test_corpora:
        for split in plan.test_splits:
            assert set(scores["results"][f"{corpus}/{split}"]["models"]) == set(plan.systems)
