"""The report from synthetic stage outputs: one model and several models, partial inputs."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib.evaluate import discourse, report, score
from pipeline_lib.constants import SIG_MARK
from pipeline_lib.schema import DOC_SCHEMA

WORDS = "in the beginning god created heaven and earth light was good evening morning day".split()


def build_results(root: Path, models: list[str], corpora=("bible",), with_training=True) -> dict:
    """Stage outputs as the other stages write them, then the real score and consistency CLIs.

    The first model is the baseline; later models are better (fewer corrupted words), so the
    results table must show positive deltas with daggers.
    """
    rng = random.Random(0)
    res = root / "results"
    for corpus in corpora:
        rows = []
        for split, n_docs in (("train", 6), ("dev", 2), ("test", 8)):
            for d in range(n_docs):
                for i in range(6):
                    ref = " ".join(rng.choice(WORDS) for _ in range(10))
                    rows.append(dict(corpus=corpus, split=split, doc_id=f"{split}{d}", sent_idx=i,
                                     src=ref.replace("the", "el"), tgt=[ref], has_context=True,
                                     origin_file="f", origin_line=1))
        ing = res / "ingest_corpus" / corpus
        ing.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows, schema=DOC_SCHEMA), ing / "docs.parquet")
        (ing / "manifest.json").write_text(json.dumps({"counts": {
            "sentences": {"train": 36, "dev": 12, "test": 48},
            "documents": {"train": 6, "dev": 2, "test": 8}}}))
        shard = res / "make_shards" / corpus / "sent" / "train"
        shard.mkdir(parents=True)
        pq.write_table(pa.table({"file": ["shard-00000.parquet"], "rows": [36],
                                 "src_tokens": [400], "tgt_tokens": [410]}),
                       shard / "index.parquet")
        for k, model in enumerate(models):
            keep = 0.4 + 0.25 * k
            hyps = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"],
                         hyp=" ".join(w if rng.random() < keep else "xx" for w in r["tgt"][0].split()))
                    for r in rows if r["split"] == "test"]
            out = res / "decode_test" / model / corpus
            out.mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(hyps), out / "test.parquet")
            (out / "test.manifest.json").write_text(json.dumps({"speed": {"sentences_per_s": 12.5 + k,
                                                                     "tokens_per_s": 300.0}}))
    for k, model in enumerate(models):
        run = res / "train_model" / model
        run.mkdir(parents=True)
        if not with_training:
            continue
        lines = [{"step": s, "split": "train", "loss": 5 - s / 100, "tokens_per_s": 1000.0}
                 for s in (10, 20)]
        lines += [{"step": s, "split": "dev", "loss": 5 - s / 50 - k, "bleu": s / 10 + k}
                  for s in (10, 20, 30)]
        (run / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\nnot json\n")
        # the trainer's manifest layout (pipeline_lib.training.train): counts.parameters / trainable
        (run / "manifest.json").write_text(json.dumps({"counts": {
            "parameters": 123456 * (k + 1), "trainable_parameters": 1000 * (k + 1)}}))
    refs = []
    hyp_args = []
    for corpus in corpora:
        refs += ["--refs", corpus, str(res / "ingest_corpus" / corpus / "docs.parquet")]
        for model in models:
            hyp_args += ["--hyp", model, corpus, "test",
                         str(res / "decode_test" / model / corpus / "test.parquet")]
    scores = res / "score_test" / "scores.json"
    assert score.main([*refs, *hyp_args, "--baseline", models[0], "--bootstrap-samples", "200",
                       "--output", str(scores)]) == 0
    consistency = res / "discourse_consistency" / "consistency.json"
    assert discourse.main(["consistency", *refs, *hyp_args, "--output", str(consistency)]) == 0
    return {"results": res, "scores": scores, "consistency": consistency}


def run_report(paths: dict, models: list[str], corpora=("bible",), extra=()) -> Path:
    out = paths["results"] / "report"
    rc = report.main(["--scores", str(paths["scores"]), "--consistency", str(paths["consistency"]),
                      "--models", *models, "--corpora", *corpora,
                      "--results-dir", str(paths["results"]), "--out-dir", str(out), *extra])
    assert rc == 0
    return out


def cells(html: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", html)


def test_report_with_one_model(tmp_path):
    paths = build_results(tmp_path, ["transformer"])
    out = run_report(paths, ["transformer"])
    html = (out / "index.html").read_text()
    md = (out / "report.md").read_text()
    assert html.count("<table>") == 4                       # results, discourse, data, models
    assert "transformer (baseline)" in html and SIG_MARK not in html.split("<ul")[0]
    assert "none configured" in html and "none configured" in md
    assert "123,456" in html and "1,000" in html and "12.5" in html  # params, trainable, speed
    assert "nrefs:1|case:mixed" in md
    assert (out / report.CURVES_FILE).stat().st_size > 5000
    assert f"![Training curves (dev loss and BLEU against step)]({report.CURVES_FILE})" in md


def test_report_with_all_models_shows_deltas_daggers_and_suites(tmp_path):
    models = ["transformer", "han", "doct"]
    paths = build_results(tmp_path, models, corpora=("bible", "news"))
    contrastive = tmp_path / "deixis.json"
    contrastive.write_text(json.dumps({"suites": {"deixis": {
        "accuracy": 62.5, "correct": 5, "total": 8,
        "by_phenomenon": {"deixis": {"accuracy": 62.5, "correct": 5, "total": 8}},
        "by_distance": {"1": {"accuracy": 50.0, "correct": 2, "total": 4}}}}}))
    out = run_report(paths, models, corpora=("bible", "news"),
                     extra=["--suites", "deixis", "--contrastive", "han", str(contrastive)])
    html = (out / "index.html").read_text()
    results = html.split("<h2")[1]
    for ts in ("bible/test BLEU", "news/test d-BLEU", "All chrF"):
        assert ts in results
    daggered = [c for c in cells(results) if c.endswith(SIG_MARK)]
    assert daggered and all(re.match(r"\d+\.\d\d \([+-]\d+\.\d\d\)†", c) for c in daggered)
    assert "62.50 (5/8)" in html                            # han on the suite
    assert "Contrastive suite deixis" in html
    assert html.count("<tr><td>doct</td>") >= 3
    order = re.findall(r"<tr><td>(\w+)", results)
    assert order == ["transformer", "han", "doct"]                # config order, baseline first
    md = (out / "report.md").read_text()
    assert md.count("| doct") >= 3 and "n/a" in md         # doct has no suite result
    models_row = {r.split(" | ")[0].lstrip("| "): r for r in md.splitlines()
                  if r.startswith("| han |") or r.startswith("| doct |")}
    assert "+100.0%" in models_row["han"] and "+200.0%" in models_row["doct"]  # vs baseline


def test_sentence_decoded_system_reads_its_models_training(tmp_path):
    (tmp_path / "train_model" / "crosstask").mkdir(parents=True)
    assert report.training_run(tmp_path, "crosstask_sent") == tmp_path / "train_model" / "crosstask"
    assert report.training_run(tmp_path, "doct") == tmp_path / "train_model" / "doct"


def test_report_survives_missing_training_outputs(tmp_path):
    paths = build_results(tmp_path, ["transformer", "han"], with_training=False)
    out = run_report(paths, ["transformer", "han"])
    html = (out / "index.html").read_text()
    assert "no dev metrics for transformer, han" in html
    row = next(r for r in html.splitlines() if r.startswith("<tr><td>han</td>") and "n/a" in r)
    assert "n/a" in row
