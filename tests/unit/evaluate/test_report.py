"""The report from stage outputs that the stages' own writers wrote: a plaintext corpus ingested
for real (with quarantined lines), real shards, training records through the trainer's
MetricsLog with its manifest layout, decode manifests, Snakemake's benchmark writer, and the
real score and discourse CLIs. One model, several models with controls and a two-step chain,
and missing inputs."""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from snakemake.benchmark import BenchmarkRecord, write_benchmark_records

from pipeline_lib.evaluate.score import SIG_MARK
from pipeline_lib.layout import SENT_SUFFIX
from pipeline_lib.evaluate import discourse, score
from pipeline_lib.evaluate.report import build, data_gap, document, render
from pipeline_lib.evaluate.report.chains import start_updates
from pipeline_lib.evaluate.report.inputs import Inputs, TrainRun, read_benchmark
from pipeline_lib.evaluate.report.verdict import verdict_table
from pipeline_lib.ingest import Limits
from pipeline_lib.ingest.__main__ import ingest
from pipeline_lib.manifest import Manifest
from pipeline_lib.models.search import BeamConfig
from pipeline_lib.run_config import load_config
from pipeline_lib.preprocess import shards
from pipeline_lib.preprocess.bpe import ENCODED_SCHEMA
from pipeline_lib.training.metrics import MetricsLog
from pipeline_lib.training.train_config import TrainConfig

WORDS = "in the beginning god created heaven and earth light was good evening morning day".split()
SPLITS = (("train", 6), ("dev", 2), ("test", 8))
MAX_LEN = 20   # shards.max_len of the fixture: the long train line is dropped at sharding
VALIDATE = 50


def _corpus(root: Path, corpus: str, rng: random.Random) -> dict:
    """Plaintext files of every split (6 sentences a document) and the reader's spec; train
    has a control character, an empty target and a line too long for the shards."""
    spec: dict = {"reader": "plaintext", "splits": {}}
    for split, n_docs in SPLITS:
        src, tgt, ids = [], [], []
        for d in range(n_docs):
            for _ in range(6):
                ref = " ".join(rng.choice(WORDS) for _ in range(10))
                src.append(ref.replace("the", "el"))
                tgt.append(ref)
                ids.append(f"{split}{d}")
        if split == "train":
            src[1] = "el \x1b dia"           # control_character
            tgt[2] = ""                       # empty_segment
            src[3] = tgt[3] = " ".join(WORDS * 3)   # > MAX_LEN pieces: too_long at sharding
        files = {}
        for key, lines in (("src", src), ("tgt", tgt), ("docids", ids)):
            files[key] = root / "raw" / corpus / f"{split}.{key}"
            files[key].parent.mkdir(parents=True, exist_ok=True)
            files[key].write_text("\n".join(lines) + "\n")
        spec["splits"][split] = {k: str(v) for k, v in files.items()}
    return spec


def _piece_ids(text: str | None) -> list[int] | None:
    return None if text is None else [4 + sum(map(ord, w)) % 400 for w in text.split()]


def _shards(docs: Path, encoded: Path, out: Path) -> None:
    """make_shards on an encoding of the ingested rows (one piece a word)."""
    rows = [{**{k: r[k] for k in ("corpus", "split", "doc_id", "sent_idx", "has_context")},
             "src_ids": _piece_ids(r["src"]), "tgt_ids": _piece_ids(r["tgt"][0]),
             "src_heads": None, "tgt_heads": None, "src_text": r["src"], "tgt_text": r["tgt"][0]}
            for r in pq.read_table(docs).to_pylist()]
    encoded.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ENCODED_SCHEMA), encoded)
    shards.make_shards(encoded, None, out, shards.ShardConfig(1000, 100, MAX_LEN))


def _train(folder: Path, init_from: Path | None, k: int, patience: int = 0,
           capped: bool = True, model: str = "transformer", reads: tuple[Path, ...] = (),
           matched_to: Path | None = None) -> None:
    """What pipeline_lib.training.train leaves in a job folder: metrics.jsonl through its
    MetricsLog, manifest.json with the layout of Trainer.finish. A job from scratch validates
    4 times and is best at its 3rd validation; a fine-tune validates twice. With ``patience``
    the job ran under a plateau rule and stopped on it unless ``capped``. ``model``: its
    registry name; ``reads``: the shard folders it recorded as inputs, as the trainer does;
    ``matched_to``: a matched control's model manifest (it trained those updates, rule off)."""
    folder.mkdir(parents=True)
    steps = 2 * VALIDATE if init_from else 4 * VALIDATE
    losses = [4.0 - 0.2 * i - 0.1 * k for i in range(2)] if init_from else \
        [5.0, 4.4, 4.1 - 0.1 * k, 4.2]
    metrics = MetricsLog(folder, 0, True)
    for i, loss in enumerate(losses, 1):
        for s in (i * VALIDATE - 25, i * VALIDATE):
            metrics.write({"step": s, "split": "train", "loss": loss + 0.5,
                           "tokens_per_s": 1000.0 + 100 * k, "lr": 1e-3, "epoch": 0})
        metrics.write({"step": i * VALIDATE, "split": "dev", "loss": loss, "nll": loss - 0.1,
                       "ppl": 2.718 ** loss, "bleu": 10 * (6 - loss)})
    metrics.close()
    tcfg = TrainConfig(max_steps=steps, validate_every=VALIDATE,
                       patience=0 if matched_to else patience,
                       init_from=str(init_from) if init_from else None,
                       matched_to=str(matched_to) if matched_to else None)
    m = Manifest(stage="train_model", params={"train": tcfg.to_dict(),
                                              "model": {"name": model, "d_model": 32}})
    for path in reads:
        m.add_input(path)
    m.counts = {"steps": steps, "target_tokens": 400 * steps, "epochs_started": 1,
                "parameters": 123456 * (k + 1), "trainable_parameters": 1000 * (k + 1),
                "frozen_parameters": 0}
    m.extra = {"best_dev_loss": min(losses),
               "init_from": {"missing": [], "unexpected": []} if init_from else None,
               "data_mode": "sentence", "dev_bleu_skipped": False,
               "aux_position": {"epoch": 0, "batches": 0}, "world_size": 1, "device": "cpu",
               "stop": {"reason": "max_steps" if capped or not patience else "plateau",
                        "updates": steps, "rule": tcfg.stop_rule().to_dict(),
                        "best": min(losses), "best_step": VALIDATE * (losses.index(min(losses)) + 1),
                        "validations_without_gain": 1, "interruptions": []}}
    m.write(folder / "manifest.json")


def _decode_manifest(path: Path, n: int, k: int) -> None:
    """The manifest pipeline_lib.evaluate.decode writes beside <split>.parquet."""
    m = Manifest(stage="decode_test", params={**asdict(BeamConfig()), "mode": "auto",
                                              "unit": "document", "device": "cpu"})
    m.counts = {"sentences": n, "documents": 8, "hyp_tokens": 10 * n, "truncated_sources": 0,
                "decode_seconds": 4.0, "sentences_per_s": 12.5 + k,
                "tokens_per_s": 300.0, "mode": "sentence", "data_mode": "sentence", "unit": None}
    m.write(path)


def write_benchmark(path: Path, seconds: float, measured: bool = True) -> None:
    """A benchmark file through Snakemake's own writer (NA where nothing was sampled)."""
    record = BenchmarkRecord(running_time=seconds, max_rss=250.0, cpu_time=seconds * 0.9)
    record.data_collected = measured
    record.process_gone = not measured
    path.parent.mkdir(parents=True, exist_ok=True)
    write_benchmark_records([record], str(path), False)


def build_results(root: Path, models: list[str], corpora=("bible",), with_training=True,
                  parents: dict[str, str] | None = None, controls: dict[str, str] | None = None,
                  sentence_decoded: tuple[str, ...] = (), patience: int = 0,
                  capped: tuple[str, ...] = (), replicates: dict | None = None,
                  data: dict[str, str] | None = None,
                  matched: dict[str, str] | None = None) -> dict:
    """Stage outputs of a run of ``models`` (baseline first), as the stages write them, and the
    report's flags naming each. ``parents``: job -> the job it starts from (trained too);
    ``controls``: model -> its matched control (a system of its own); ``sentence_decoded``:
    models also decoded as ``<model>_sent``. Later systems are better (fewer corrupted words),
    so the results show positive deltas with daggers. ``patience`` > 0: every job ran under a
    plateau rule, the ``capped`` ones reached max_steps first; ``replicates``: system ->
    (group, seed) of a several-seed run; ``data``: job -> the shard task (sent | doc) whose
    train and dev folders its manifest records as inputs (none recorded for other jobs);
    ``matched``: control job -> the model whose updates it trained (converged regime). A job
    named transformer* trains the registry's transformer, any other the model of its name."""
    rng = random.Random(0)
    res = root / "results"
    parents, controls = dict(parents or {}), dict(controls or {})
    systems = {s: s for s in [*models, *dict.fromkeys(controls.values())]}
    systems.update({f"{m}{SENT_SUFFIX}": m for m in sentence_decoded})
    jobs = list(dict.fromkeys([*systems.values(), *parents.values()]))
    args = [a for s, job in systems.items() for a in ("--system", s, job)]
    refs, hyp_args = [], []
    for corpus in corpora:
        ing = res / "ingest_corpus" / corpus
        ingest(corpus, _corpus(root, corpus, rng), Limits(), ing)
        _shards(ing / "docs.parquet", res / "encode_bpe" / corpus / "encoded.parquet",
                res / "make_shards" / corpus)
        args += ["--ingest", corpus, str(ing / "manifest.json"),
                 "--shards", corpus, str(res / "make_shards" / corpus / "manifest.json")]
        write_benchmark(root / "benchmarks" / "ingest_corpus" / f"{corpus}.tsv", 3.0)
        args += ["--benchmark", "ingest_corpus",
                 str(root / "benchmarks" / "ingest_corpus" / f"{corpus}.tsv")]
        refs += ["--refs", corpus, str(ing / "docs.parquet")]
        test = [r for r in pq.read_table(ing / "docs.parquet").to_pylist() if r["split"] == "test"]
        for k, system in enumerate(systems):
            keep = min(0.95, 0.4 + 0.15 * k)
            hyps = [dict(doc_id=r["doc_id"], sent_idx=r["sent_idx"],
                         hyp=" ".join(w if rng.random() < keep else "xx"
                                      for w in r["tgt"][0].split()))
                    for r in test]
            out = res / "decode_test" / system / corpus
            out.mkdir(parents=True)
            pq.write_table(pa.Table.from_pylist(hyps), out / "test.parquet")
            _decode_manifest(out / "test.manifest.json", len(hyps), k)
            hyp_args += ["--hyp", system, corpus, "test", str(out / "test.parquet")]
            args += ["--decode", system, str(out / "test.manifest.json")]
            bench = root / "benchmarks" / "decode_test" / system / corpus / "test.tsv"
            write_benchmark(bench, 4.0 + k, measured=k != 1)
            args += ["--benchmark", "decode_test", str(bench)]
    for k, job in enumerate(jobs):
        folder = res / "train_model" / job
        bench = root / "benchmarks" / "train_model" / f"{job}.tsv"
        if with_training:
            init = parents.get(job)
            reads = tuple(res / "make_shards" / c / data[job] / split for c in corpora
                          for split in ("train", "dev")) if job in (data or {}) else ()
            of = (matched or {}).get(job)
            _train(folder, res / "train_model" / init / "checkpoints" / "best" if init else None,
                   k, patience, job in capped,
                   "transformer" if job.startswith("transformer") else job, reads,
                   res / "train_model" / of / "manifest.json" if of else None)
            write_benchmark(bench, 600.0 + 60 * k)
        args += ["--train", job, str(folder / "manifest.json"), str(folder / "metrics.jsonl"),
                 parents.get(job) or "", "--benchmark", "train_model", str(bench)]
    scores = res / "score_test" / "scores.json"
    control_args = [a for m, c in controls.items() for a in ("--control", m, c)]
    control_args += [str(a) for s, (g, seed) in (replicates or {}).items()
                     for a in ("--replicate", s, g, seed)]
    assert score.main([*refs, *hyp_args, "--baseline", models[0], *control_args,
                       "--bootstrap-samples", "200", "--output", str(scores)]) == 0
    consistency = res / "discourse_consistency" / "consistency.json"
    assert discourse.main(["consistency", *refs, *hyp_args, "--output", str(consistency)]) == 0
    args += ["--config-json", json.dumps(load_config(), sort_keys=True)]
    return {"results": res, "scores": scores, "consistency": consistency, "args": args}


def run_report(paths: dict, extra=()) -> Path:
    out = paths["results"] / "report"
    rc = build.main(["--scores", str(paths["scores"]), "--consistency", str(paths["consistency"]),
                      *paths["args"], "--out-dir", str(out), *extra])
    assert rc == 0
    return out


def cells(html: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", html)


def section(md: str, title: str) -> str:
    return md.split(f"## {title}\n")[1].split("\n## ")[0]


def md_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]


NO_GAP = ("Data-subset gap: none measured: no pair of controls differing only in their shards "
            "(no two evaluated systems trained alike from the same checkpoint on different "
            "shards).")


def test_report_with_one_model(tmp_path):
    paths = build_results(tmp_path, ["transformer"])
    out = run_report(paths)
    html = (out / "index.html").read_text()
    md = (out / "report.md").read_text()
    for title in ("Run", "BLEU with 95 % intervals", "All metrics", "Discourse", "Training",
                  "Models", "Data funnel", "Wall time per stage"):
        assert f'<h2 id="{render._slug(title)}">' in html and f"## {title}\n" in md, title
    assert "transformer (baseline)" in html and SIG_MARK not in html.split("<ul")[0]
    assert "none configured" in html and "none configured" in md
    assert "123,456" in html and "1,000" in html and "12.5" in html  # params, trainable, speed
    assert "nrefs:1|case:mixed" in md
    # a lone baseline has its own interval (score_test resamples it alone too)
    bleu = md_rows(section(md, "BLEU with 95 % intervals"))[1]
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]["models"]
    mean, half = scores["transformer"]["bleu_ci"]
    assert bleu[:4] == ["bible/test", "transformer (baseline)",
                        f"{scores['transformer']['bleu']:.2f}", f"{mean - half:.2f} – {mean + half:.2f}"]
    for image in (document.BLEU_FILE, document.CURVES_FILE):
        assert (out / image).stat().st_size > 5000 and f"]({image})" in md
        assert f'src="{image}"' in html
    config = json.loads((out / document.CONFIG_FILE).read_text())
    assert config == json.loads(paths["args"][paths["args"].index("--config-json") + 1])
    run = dict(md_rows(section(md, "Run"))[1:])
    assert re.fullmatch(r"[0-9a-f]{64} \(config.json\)", run["Config sha256"])
    assert run["Training device"] == "cpu, 1 process(es): 1 job(s)"
    assert run["Decoding device"] == "cpu: 1 job(s)"


def test_report_with_all_models_shows_deltas_daggers_and_suites(tmp_path):
    models = ["transformer", "han", "doct"]
    paths = build_results(tmp_path, models, corpora=("bible", "news"))
    contrastive = tmp_path / "deixis.json"
    contrastive.write_text(json.dumps({"suites": {"deixis": {
        "accuracy": 62.5, "correct": 5, "total": 8,
        "by_phenomenon": {"deixis": {"accuracy": 62.5, "correct": 5, "total": 8}},
        "by_distance": {"1": {"accuracy": 50.0, "correct": 2, "total": 4}}}}}))
    out = run_report(paths, extra=["--suites", "deixis", "--contrastive", "han", str(contrastive)])
    html = (out / "index.html").read_text()
    results = html.split('<h2 id="all-metrics">')[1].split("<h2")[0]
    for ts in ("bible/test BLEU", "news/test d-BLEU", "All chrF"):
        assert ts in results
    daggered = [c for c in cells(results) if c.endswith(SIG_MARK)]
    assert daggered and all(re.match(r"\d+\.\d\d \([+-]\d+\.\d\d\)†", c) for c in daggered)
    assert "62.50 (5/8)" in html                            # han on the suite
    assert "Contrastive suite deixis" in html
    order = re.findall(r"<tr><td>(\w+)", results)
    assert order == ["transformer", "han", "doct"]                # config order, baseline first
    md = (out / "report.md").read_text()
    assert "| doct" in section(md, "Discourse") and "n/a" in md  # doct has no suite result
    models_row = {r[0]: r for r in md_rows(section(md, "Models"))}
    assert models_row["han"][3] == "+100.0%" and models_row["doct"][3] == "+200.0%"
    bleu = {(r[0], r[1]): r for r in md_rows(section(md, "BLEU with 95 % intervals"))[1:]}
    assert {ts for ts, _ in bleu} == {"bible/test", "news/test", "All"}
    assert bleu[("All", "doct")][4].endswith(SIG_MARK) and float(bleu[("All", "doct")][4][:-1]) > 0
    funnel = md_rows(section(md, "Data funnel"))
    assert [r[0] for r in funnel[1:]].count("news") == [r[0] for r in funnel[1:]].count("bible")


def test_fine_tunes_and_controls_continue_their_initial_jobs_update_count(tmp_path):
    """doct and its control start from the baseline's best checkpoint (its 3rd of 4
    validations: update 150 of 200), crosstask from its pre-training's; the jobs table and the
    curves count on from there, and the roles follow the scores' controls."""
    paths = build_results(tmp_path, ["transformer", "doct", "crosstask"],
                          parents={"doct": "transformer", "transformer_plus100_doc": "transformer",
                                   "crosstask": "crosstask_pretrain"},
                          controls={"doct": "transformer_plus100_doc"},
                          sentence_decoded=("crosstask",))
    out = run_report(paths)
    md = (out / "report.md").read_text()
    jobs = {r[0]: r for r in md_rows(section(md, "Training"))[1:]}
    assert jobs["transformer"][1:6] == ["baseline", "scratch", "0", "200", "200"]
    assert jobs["transformer"][7] == "150"                   # first lowest dev loss
    assert jobs["doct"][1:6] == ["model", "transformer", "150", "100", "250"]
    assert jobs["transformer_plus100_doc"][1:6] == ["control", "transformer", "150", "100", "250"]
    assert jobs["crosstask_pretrain"][1:4] == ["initialises", "scratch", "0"]
    assert jobs["crosstask"][2:4] == ["crosstask_pretrain", "150"]
    models = {r[0]: r for r in md_rows(section(md, "Models"))[1:]}
    assert models["crosstask_sent"][1] == "crosstask"
    assert models["crosstask_sent"][2] == models["crosstask"][2] != "n/a"
    bleu = {r[1]: r for r in md_rows(section(md, "BLEU with 95 % intervals"))[1:]}
    assert bleu["doct"][6] == "transformer_plus100_doc" and bleu["doct"][7][0] in "+-"
    assert bleu["crosstask"][6] == ""                         # no control given for it
    verdict = {r[0]: r[1] for r in md_rows(section(md, "Verdict").split("### Budgets")[0])[1:]}
    assert verdict["crosstask"] == verdict["crosstask_sent"] == "no matched control (smoke)"


def test_start_updates_follow_the_parents_the_plan_names(tmp_path):
    def run(job: str, parent: str | None, dev: list[tuple[int, float]]) -> TrainRun:
        return TrainRun(job, tmp_path / job / "manifest.json", {"params": {}},
                        [{"step": s, "split": "dev", "loss": v} for s, v in dev], parent)

    runs = {"a": run("a", None, [(10, 3.0), (20, 2.0), (30, 2.0)]),
            "b": run("b", "a", [(5, 1.0)]),
            "c": run("c", "b", []),
            "d": run("d", "c", []),             # c has no dev record: its best is unknown
            "e": run("e", "elsewhere", [])}     # a parent the report was not given
    runs["f"] = TrainRun("f", tmp_path / "f" / "manifest.json", None, [], "a")
    assert start_updates(runs) == {"a": 0, "b": 20, "c": 25, "d": None, "e": None,
                                          "f": None}


def test_funnel_counts_are_the_ingest_and_shard_manifests(tmp_path):
    paths = build_results(tmp_path, ["transformer"])
    out = run_report(paths)
    md = (out / "report.md").read_text()
    ingest = json.loads((paths["results"] / "ingest_corpus/bible/manifest.json").read_text())
    sharded = json.loads((paths["results"] / "make_shards/bible/manifest.json").read_text())
    rows = md_rows(section(md, "Data funnel"))
    assert rows[0] == ["Corpus", "Step", "Records", "train", "dev", "test"]
    steps = {r[1]: r[2:] for r in rows[1:]}
    kept, bad = ingest["counts"]["kept"], ingest["counts"]["quarantined"]
    assert steps["read at ingest"] == [f"{kept + bad:,}", "", "", ""]
    assert ingest["rejected"] == {"control_character": 1, "empty_segment": 1}
    assert steps["quarantined at ingest: control_character"][0] == "1"
    assert steps["kept: sentence pairs"] == [f"{kept:,}"] + [
        f"{ingest['counts']['sentences'][s]:,}" for s in ("train", "dev", "test")]
    assert sharded["rejected"] == {"too_long": 1}
    assert steps["dropped at sharding: too_long"][0] == "1"
    train_rows = sharded["counts"]["sent/train"]["rows"]
    assert steps["in the sentence-pair shards"][1] == f"{train_rows:,}"
    assert train_rows == ingest["counts"]["sentences"]["train"] - 1


def test_wall_times_come_from_the_benchmark_files(tmp_path):
    paths = build_results(tmp_path, ["transformer", "han"])
    (tmp_path / "benchmarks" / "train_model" / "han.tsv").unlink()
    out = run_report(paths)
    stages = {r[0]: r for r in md_rows(section((out / "report.md").read_text(),
                                               "Wall time per stage"))[1:]}
    assert stages["ingest_corpus"][1:5] == ["1", "0:00:03", "0:00:03", "0:00:03"]
    assert stages["train_model"][1:3] == ["2 (1 n/a)", "0:10:00"]
    # decode of han: Snakemake sampled nothing (NA): its wall time counts, its RSS does not
    assert stages["decode_test"][1:3] == ["2", "0:00:09"] and stages["decode_test"][5] == "250"
    assert stages["all jobs"][1:3] == ["5", "0:10:12"]
    assert read_benchmark(tmp_path / "absent.tsv") is None


def test_report_survives_missing_inputs(tmp_path):
    paths = build_results(tmp_path, ["transformer", "han"], with_training=False)
    (paths["results"] / "ingest_corpus" / "bible" / "manifest.json").unlink()
    out = run_report(paths)
    html = (out / "index.html").read_text()
    md = (out / "report.md").read_text()
    assert "No dev records (n/a): transformer, han" in html
    row = next(r for r in html.splitlines() if r.startswith("<tr><td>han</td>") and "n/a" in r)
    assert "n/a" in row
    assert md_rows(section(md, "Data funnel"))[1][:3] == ["bible", "read at ingest", "n/a"]
    assert dict(md_rows(section(md, "Run"))[1:])["Training device"] == "n/a"


def test_report_opens_with_its_verdict_regime_and_budgets(tmp_path):
    """Verdict first: the regime (smoke: fixed budgets), one line per model against its
    matched control with Δ and p, then every system's updates, target tokens and tokens per
    update, and why each job stopped."""
    paths = build_results(tmp_path, ["transformer", "doct"],
                          parents={"doct": "transformer", "transformer_plus100_doc": "transformer"},
                          controls={"doct": "transformer_plus100_doc"})
    out = run_report(paths)
    md = (out / "report.md").read_text()
    assert md.split("\n## ")[1].startswith("Verdict\n")
    verdict = section(md, "Verdict")
    assert verdict.lstrip().startswith("Regime: smoke.")
    rows = md_rows(verdict.split("### Budgets")[0])
    assert rows[0][:5] == ["Model", "Verdict", "Δ BLEU vs control",
                           "Δ 95 % CI: documents (sentences)", "p"]
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]["models"]
    c = scores["doct"]["control"]
    doct = rows[1]
    assert doct[0] == "doct" and doct[5] == "transformer_plus100_doc"
    assert c["bleu_significant"] and c["bleu_delta"] < 0      # the fixture's control is better
    # one seed: no verdict under the rule, only what its bootstrap says
    assert doct[1] == "not decided: one seed (its bootstrap: significantly worse) (smoke)"
    assert doct[2] == f"{c['bleu_delta']:+.2f}" and doct[4] == f"{c['bleu_p']:.4f} (paired bootstrap)"
    lo, hi = c["bleu_delta_ci_documents"]
    slo, shi = c["bleu_delta_ci_sentences"]
    assert doct[3] == f"[{lo:+.2f}, {hi:+.2f}] ([{slo:+.2f}, {shi:+.2f}])"
    assert "Rule: a model beats its matched control where the mean Δ BLEU" in verdict
    assert doct[6:] == ["100", "100", "max_steps @ 100 / max_steps @ 100"]
    assert NO_GAP in verdict.split("### Budgets")[0].splitlines() and "### Data-subset gap" not in md
    budgets = {r[0]: r for r in md_rows(verdict.split("### Budgets")[1])[1:]}
    # _train: 400 target tokens per update; doct starts at the baseline's best (update 150)
    assert budgets["transformer"][1:9] == ["baseline", "transformer", "200", "80,000", "400", "0",
                                           "200", "max_steps @ 200"]
    assert budgets["doct"][3:8] == ["100", "40,000", "400", "150", "250"]
    assert dict(md_rows(section(md, "Run"))[1:])["Regime"] == "smoke"
    assert [r[0] for r in rows[1:]] == ["doct"]          # models only, not the baseline or control
    jobs = {r[0]: r for r in md_rows(section(md, "Training"))[1:]}
    assert jobs["doct"][-1] == "max_steps @ 100"
    html = (out / "index.html").read_text()
    assert html.index('id="verdict"') < html.index('id="run"') and "<p>Regime: smoke." in html


def test_converged_regime_names_jobs_that_hit_their_cap(tmp_path):
    paths = build_results(tmp_path, ["transformer", "doct"],
                          parents={"doct": "transformer",
                                   "transformer_plus_plateau_doc": "transformer"},
                          controls={"doct": "transformer_plus_plateau_doc"}, patience=3,
                          capped=("transformer_plus_plateau_doc",))
    md = (run_report(paths) / "report.md").read_text()
    verdict = section(md, "Verdict")
    assert verdict.lstrip().startswith("Regime: converged.")
    assert "patience 3 validations" in verdict
    assert ("Not converged: 1 job(s) reached their max_steps cap before a plateau: "
            "transformer_plus_plateau_doc.") in verdict
    row = md_rows(verdict)[1]
    assert row[1].endswith("(converged); not converged: transformer_plus_plateau_doc hit max_steps")
    assert row[8] == "plateau @ 100 / max_steps @ 100"


def test_a_matched_control_keeps_the_regime_converged_and_says_whose_updates(tmp_path):
    """Issue 34 item 1: a control that trained exactly its model's updates stops at that
    budget (max_steps), which is neither a cap hit nor a smoke budget."""
    paths = build_results(tmp_path, ["transformer", "doct"],
                          parents={"doct": "transformer",
                                   "transformer_plus_matched_doct": "transformer"},
                          controls={"doct": "transformer_plus_matched_doct"}, patience=3,
                          matched={"transformer_plus_matched_doct": "doct"})
    md = (run_report(paths) / "report.md").read_text()
    verdict = section(md, "Verdict")
    assert verdict.lstrip().startswith("Regime: converged.") and "Not converged" not in verdict
    assert "matched control then trained exactly the model's updates" in verdict
    row = md_rows(verdict)[1]
    assert "not converged" not in row[1] and row[6] == row[7] == "100"
    budgets = {r[0]: r for r in md_rows(verdict.split("### Budgets")[1])[1:]}
    assert budgets["transformer_plus_matched_doct"][-1] == "matched: doct's updates"
    assert budgets["doct"][-1] == "plateau: dev loss, patience 3"


def test_several_seeds_give_statistics_across_seeds_and_a_t_test_verdict(tmp_path):
    seeds = (1, 2, 3)
    models = [f"{m}_seed{s}" for m in ("transformer", "doct") for s in seeds]
    parents = {f"{j}_seed{s}": f"transformer_seed{s}"
               for j in ("doct", "ctrl") for s in seeds}
    controls = {f"doct_seed{s}": f"ctrl_seed{s}" for s in seeds}
    replicates = {f"{g}_seed{s}": (g, s) for g in ("transformer", "doct", "ctrl") for s in seeds}
    paths = build_results(tmp_path, models, parents=parents, controls=controls,
                          replicates=replicates)
    md = (run_report(paths) / "report.md").read_text()
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]
    c = scores["seeds"]["doct"]["control"]
    row = md_rows(section(md, "Verdict"))[1]
    assert row[0] == "doct" and row[5] == "ctrl" and row[4].endswith("(paired t-test across seeds)")
    assert row[3].count("; ") == 2                       # each seed's document interval of Δ
    assert row[1].split(" (")[0] in ("beats its control", "worse than its control") or \
        row[1].startswith("does not beat its control: ")
    assert row[2] == f"{c['mean']:+.2f} ± {c['sd']:.2f} (3 seeds, {c['wins']} better)"
    assert row[6] == row[7] == "100/100/100"
    across = {r[1]: r for r in md_rows(section(md, "BLEU with 95 % intervals")
                                       .split("### Across seeds")[1])[1:]}
    assert across["doct"][2] == "1, 2, 3"
    assert across["doct"][3] == ", ".join(f"{x:.2f}" for x in scores["seeds"]["doct"]["bleu"])
    assert across["transformer"][5] == "" and across["ctrl"][8] != ""
    # each seed's systems are compared with the same seed's baseline
    bleu = {r[1]: r for r in md_rows(section(md, "BLEU with 95 % intervals"))[1:]
            if r[0] == "bible/test"}
    assert bleu["transformer_seed2 (baseline)"][4:6] == ["", ""]
    b2, d2 = (scores["models"][f"{m}_seed2"]["bleu"] for m in ("transformer", "doct"))
    assert bleu["doct_seed2"][4].rstrip("†") == f"{d2 - b2:+.2f}"
    roles = {r[0]: r[1] for r in md_rows(section(md, "Training"))[1:]}
    assert {roles[f"transformer_seed{s}"] for s in seeds} == {"baseline"}
    assert {roles[f"ctrl_seed{s}"] for s in seeds} == {"control"}


def test_seeds_from_one_baseline_are_tested_against_it_and_say_so(tmp_path):
    """seed_scope fine_tune (issue 34 item 5): the baseline trained once, DocT and its control
    per seed from it; every seed's DocT is compared with that one baseline, and the report says
    the fine-tune stage was replicated from one baseline."""
    seeds = (1, 2, 3)
    models = ["transformer"] + [f"{m}_seed{s}" for m in ("doct",) for s in seeds]
    parents = {f"{j}_seed{s}": "transformer" for j in ("doct", "ctrl") for s in seeds}
    controls = {f"doct_seed{s}": f"ctrl_seed{s}" for s in seeds}
    replicates = {f"{g}_seed{s}": (g, s) for g in ("doct", "ctrl") for s in seeds}
    paths = build_results(tmp_path, models, parents=parents, controls=controls,
                          replicates=replicates)
    md = (run_report(paths) / "report.md").read_text()
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]
    row = md_rows(section(md, "Verdict"))[1]
    assert row[0] == "doct" and row[4].endswith("(paired t-test across seeds)")
    across = section(md, "BLEU with 95 % intervals").split("### Across seeds")[1]
    assert "replicated over 3 seeds from one baseline, transformer, trained once" in across
    assert "transformer" not in {r[1] for r in md_rows(across)[1:]}
    bleu = {r[1]: r for r in md_rows(section(md, "BLEU with 95 % intervals"))[1:]
            if r[0] == "bible/test"}
    b, d2 = scores["models"]["transformer"]["bleu"], scores["models"]["doct_seed2"]["bleu"]
    assert bleu["doct_seed2"][4].rstrip("†") == f"{d2 - b:+.2f}"
    roles = {r[0]: r[1] for r in md_rows(section(md, "Training"))[1:]}
    assert roles["transformer"] == "baseline" and roles["ctrl_seed2"] == "control"


# ------------------------------------------------------------------------------------------------
# the data-subset gap: systems trained alike that differ only in the shards they read
# ------------------------------------------------------------------------------------------------

def test_the_data_subset_gap_is_between_controls_that_differ_only_in_their_shards(tmp_path):
    """doct (document shards) and dbsa (the sentence shards, standing in for the parsed
    subset) each get a control continued from the baseline's checkpoint for the same updates:
    the two controls differ only in the shards they read, so their BLEU gap is the data's. The
    models differ from each other and from their controls in the model, the baseline from the
    controls in its parent and updates: no other pair."""
    paths = build_results(tmp_path, ["transformer", "doct", "dbsa"],
                          parents={j: "transformer" for j in ("doct", "dbsa",
                                                              "transformer_plus100_doc",
                                                              "transformer_plus100_heads")},
                          controls={"doct": "transformer_plus100_doc",
                                    "dbsa": "transformer_plus100_heads"},
                          data={"transformer": "sent", "doct": "doc", "dbsa": "sent",
                                "transformer_plus100_doc": "doc",
                                "transformer_plus100_heads": "sent"})
    out = run_report(paths)
    md = (out / "report.md").read_text()
    verdict = section(md, "Verdict")
    scores = json.loads(paths["scores"].read_text())["results"]["bible/test"]["models"]
    doc, heads = (scores[f"transformer_plus100_{d}"]["bleu"] for d in ("doc", "heads"))
    gap = round(abs(doc - heads), 2)
    assert gap > 0
    table = verdict.split("### Data-subset gap\n")[1].split("### Budgets")[0]
    rows = md_rows(table)
    assert rows == [["Pair", "BLEU each", "Absolute Δ BLEU", "p"],
                    ["transformer_plus100_doc vs transformer_plus100_heads",
                     f"{doc:.2f} / {heads:.2f}", f"{gap:.2f}", "n/a"]]   # score_test: no test
    assert f"- Data-subset gap: {gap:.2f} BLEU on bible/test, the largest difference" in table
    assert "not noise" in table
    assert ("- transformer_plus100_doc reads "
            f"{paths['results'] / 'make_shards/bible/doc/dev'}, "
            f"{paths['results'] / 'make_shards/bible/doc/train'}; transformer_plus100_heads "
            f"reads {paths['results'] / 'make_shards/bible/sent/dev'}") in table
    # right after the verdict table, before the budgets
    assert verdict.index("| doct |") < verdict.index("### Data-subset gap") < verdict.index("### Budgets")
    html = (out / "index.html").read_text()
    assert html.index("<h3>Data-subset gap</h3>") < html.index("<h3>Budgets")


def _run(tmp_path: Path, job: str, parent: str | None, reads: str | None, seed: int = 1,
         model: str = "transformer", steps: int = 100) -> TrainRun:
    """A job as its manifest records it: model, train settings, the shards it read."""
    init = f"results/train_model/{parent}/checkpoints/best" if parent else None
    inputs = {f"results/make_shards/bible/{reads}/train": f"sha-{reads}",
              "results/spm/spm.model": "sha-spm"} if reads else {}
    if init:
        inputs[init] = f"sha-{parent}"
    manifest = {"params": {"model": {"name": model, "d_model": 32},
                           "train": {"max_steps": steps, "seed": seed, "init_from": init}},
                "inputs": inputs, "counts": {"steps": steps},
                "stop": {"reason": "max_steps", "updates": steps}}
    return TrainRun(job, tmp_path / job / "manifest.json", manifest, [], parent)


def _inputs(tmp_path: Path, bleu: dict[str, float], controls: dict[str, str],
            runs: list[TrainRun]) -> Inputs:
    """Inputs with a scores document of the layout score_test writes (one test set): each
    system's BLEU, each model's test against its control."""
    rows = {s: {"bleu": b} for s, b in bleu.items()}
    for model, control in controls.items():
        delta = round(bleu[model] - bleu[control], 2)
        rows[model]["control"] = {"system": control, "bleu_delta": delta, "bleu_p": 0.001,
                                  "bleu_significant": True}
    scores = {"baseline": next(iter(bleu)), "models": list(bleu), "test_sets": ["bible/test"],
              "controls": controls, "config": {"significance_level": 0.05},
              "results": {"bible/test": {"models": rows}}}
    return Inputs(scores=scores, consistency=None, contrastive={}, suites=[],
                  systems={s: s for s in bleu}, train={r.job: r for r in runs},
                  decode={}, ingest={}, shards={}, benchmarks={}, config={})


def _smoke_run(tmp_path: Path, heads_seed: int = 1) -> Inputs:
    """The smoke run of the issue: the two controls 1.46 BLEU apart; doct 2.00 above its
    control, dbsa 1.00 below its own, camn 1.46 below its own (as large as the gap)."""
    runs = [_run(tmp_path, "transformer", None, "sent", steps=200),
            _run(tmp_path, "doct", "transformer", "doc", model="doct"),
            _run(tmp_path, "dbsa", "transformer", "heads", model="dbsa"),
            _run(tmp_path, "camn", "transformer", "doc", model="camn"),
            _run(tmp_path, "transformer_plus150_doc", "transformer", "doc"),
            _run(tmp_path, "transformer_plus150_heads", "transformer", "heads", seed=heads_seed)]
    bleu = {"transformer": 11.0, "doct": 15.78, "dbsa": 11.32, "camn": 12.32,
            "transformer_plus150_doc": 13.78, "transformer_plus150_heads": 12.32}
    controls = {"doct": "transformer_plus150_doc", "dbsa": "transformer_plus150_heads",
                "camn": "transformer_plus150_doc"}
    return _inputs(tmp_path, bleu, controls, runs)


def test_the_gap_of_the_data_subsets_is_shown_not_compared_as_noise(tmp_path):
    inputs = _smoke_run(tmp_path)
    pairs = data_gap.data_pairs(inputs)
    assert [(p.first, p.second, p.delta, p.p) for p in pairs] == [
        ("transformer_plus150_doc", "transformer_plus150_heads", 1.46, None)]
    assert pairs[0].reads == (["results/make_shards/bible/doc/train"],
                              ["results/make_shards/bible/heads/train"])
    assert data_gap.largest_gap(pairs) == 1.46
    block = data_gap.data_gap_block(inputs)
    assert block.rows == [["transformer_plus150_doc vs transformer_plus150_heads",
                           "13.78 / 12.32", "1.46", "n/a"]]
    # the verdict no longer weighs a Δ against the gap: it is not noise (issue 34)
    verdict = verdict_table(inputs)
    assert "Exceeds noise floor" not in verdict.header
    assert {r[0]: r[2] for r in verdict.rows} == {"doct": "+2.00", "dbsa": "-1.00",
                                                  "camn": "-1.46"}


def test_no_pair_gives_one_line_and_no_gap(tmp_path):
    inputs = _smoke_run(tmp_path, heads_seed=2)   # the controls now differ in their seed too
    assert data_gap.data_pairs(inputs) == [] and data_gap.largest_gap([]) is None
    block = data_gap.data_gap_block(inputs)
    assert isinstance(block, document.Text) and block.paragraphs == [NO_GAP]
    md = render.to_markdown("t", [document.Section("Verdict", [block])])
    assert md.splitlines()[2:] == ["## Verdict", "", NO_GAP]   # one line
    unscored = data_gap.data_gap_block(replace(inputs, scores=None))
    assert unscored.paragraphs == ["Data-subset gap: n/a (scores not read)."]


def test_a_pair_differs_in_its_data_and_nothing_else(tmp_path):
    base = _run(tmp_path, "a", "transformer", "doc")
    same = dict(job="b", parent="transformer", reads="heads")
    assert data_gap.differ_only_in_data(base, _run(tmp_path, **same))
    for differs in ({"reads": "doc"},                  # the same shards: nothing differs
                    {"reads": None},                   # shards not recorded: cannot tell
                    {"seed": 2},                       # a train setting
                    {"steps": 150},                    # the updates
                    {"model": "doct"},                 # the model
                    {"parent": "other"}):              # the checkpoint it starts from
        assert not data_gap.differ_only_in_data(base, _run(tmp_path, **{**same, **differs})), differs
    no_manifest = TrainRun("c", tmp_path / "c" / "manifest.json", None, [], "transformer")
    assert not data_gap.differ_only_in_data(base, no_manifest)
    # decoded differently (b_sent: each sentence alone) is no pair, decoded alike is
    inputs = _inputs(tmp_path, {"a": 10.0, "b_sent": 11.0, "b": 12.0}, {},
                     [base, _run(tmp_path, **same)])
    inputs.systems["b_sent"] = "b"
    assert [(p.first, p.second) for p in data_gap.data_pairs(inputs)] == [("a", "b")]


def test_a_pair_shows_the_p_value_where_score_test_tested_it(tmp_path):
    """score_test tests a system against its baseline and its matched control only: a pair
    that is one of those gets that p, any other none (n/a, not invented)."""
    inputs = _inputs(tmp_path, {"a": 10.0, "b": 12.0, "c": 12.5}, {"b": "a"},
                     [_run(tmp_path, "a", "transformer", "doc"),
                      _run(tmp_path, "b", "transformer", "heads"),
                      _run(tmp_path, "c", "transformer", "sent")])
    inputs.scores["results"]["bible/test"]["models"]["c"]["bleu_p"] = 0.2   # c against baseline a
    pairs = {(p.first, p.second): p.p for p in data_gap.data_pairs(inputs)}
    assert pairs == {("a", "b"): 0.001, ("a", "c"): 0.2, ("b", "c"): None}
    assert [r[3] for r in data_gap.data_gap_block(inputs).rows] == ["0.0010", "0.2000", "n/a"]


def test_budget_table_shows_each_jobs_schedule_and_stop_rule(tmp_path):
    """Issue 26 item 5: every system's row in the budget table gives the schedule its job ran
    (peak learning rate, warm-up, max_steps from params.train) and its stop rule beside why it
    stopped, so a reader sees what ran: fixed budgets in the smoke regime, the dev plateau in the
    converged one. A job no system is (a pre-training others start from) has a row too."""
    defaults = TrainConfig()
    for patience, rule in ((0, "fixed"), (3, "plateau: dev loss, patience 3")):
        paths = build_results(tmp_path / f"p{patience}", ["transformer", "doct"],
                              parents={"doct": "transformer_pre"}, patience=patience,
                              capped=("transformer",))
        md = (run_report(paths) / "report.md").read_text()
        rows = md_rows(section(md, "Verdict").split("### Budgets")[1])
        assert rows[0][8:] == ["Stopped", "LR", "Warm-up", "Max steps", "Stop rule"]
        budgets = {r[2]: r for r in rows[1:]}          # by training job
        assert sorted(budgets) == ["doct", "transformer", "transformer_pre"]
        assert budgets["transformer_pre"][:2] == ["—", "initialises"]
        for job, steps in (("transformer", 4 * VALIDATE), ("doct", 2 * VALIDATE),
                           ("transformer_pre", 4 * VALIDATE)):
            row = budgets[job]
            assert row[9:] == [f"{defaults.lr:.3g}", f"{defaults.warmup:,}", f"{steps:,}", rule], row
            reason = "max_steps" if not patience or job == "transformer" else "plateau"
            assert row[8] == f"{reason} @ {steps:,}", row
