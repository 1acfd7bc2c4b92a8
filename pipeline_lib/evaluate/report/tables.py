"""The tables of the other sections: the run's provenance, discourse, the training jobs, the
models, the data funnel and the wall time per stage; each reads the manifests and records of
the stages that wrote them."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from typing import Any

from pipeline_lib.evaluate.report.chains import best_update, parent_job, regime, stopped
from pipeline_lib.evaluate.report.document import CONFIG_FILE, NA, Table, fmt, hms
from pipeline_lib.evaluate.report.inputs import Inputs
from pipeline_lib.tables import Split


def run_table(inputs: Inputs, manifests: dict[str, list[dict]]) -> Table:
    """Provenance: what ran, from which code and config, where, and when."""
    t = Table("Run", ["", "Value"])
    t.rows.append(["Regime", regime(inputs.train)])
    revisions: dict[str, set[str]] = defaultdict(set)
    versions: dict[str, set[str]] = defaultdict(set)
    finished = []
    for stage, records in manifests.items():
        for m in records:
            revisions[m.get("git_revision") or NA].add(stage)
            for k, v in (m.get("versions") or {}).items():
                versions[k].add(str(v))
            if m.get("finished"):
                finished.append(m["finished"])
    if len(revisions) == 1:
        t.rows.append(["Git revision", next(iter(revisions))])
    else:
        t.rows.append(["Git revisions", "; ".join(f"{rev} ({', '.join(sorted(stages))})"
                                                  for rev, stages in sorted(revisions.items()))])
    canonical = json.dumps(inputs.config, sort_keys=True, separators=(",", ":"))
    t.rows.append(["Config sha256", f"{hashlib.sha256(canonical.encode()).hexdigest()} "
                                    f"({CONFIG_FILE})"])
    devices = Counter(f"{m.get('device', NA)}, {m.get('world_size', NA)} process(es)"
                      for r in inputs.train.values() if (m := r.manifest) is not None)
    t.rows.append(["Training device", "; ".join(f"{d}: {n} job(s)" for d, n in devices.items())
                   or NA])
    decode = Counter(m.get("params", {}).get("device", NA)
                     for ms in inputs.decode.values() for m in ms if m is not None)
    t.rows.append(["Decoding device", "; ".join(f"{d}: {n} job(s)" for d, n in decode.items())
                   or NA])
    t.rows.append(["Stages finished (UTC)",
                   f"{min(finished)} … {max(finished)}" if finished else NA])
    walls = [r["s"] for rs in inputs.benchmarks.values() for r in rs if r and "s" in r]
    t.rows.append(["Job wall time, summed", hms(sum(walls)) if walls else NA])
    for k in ("platform", "python", "torch", "sacrebleu", "sentencepiece", "stanza",
              "snakemake"):
        t.rows.append([k, " / ".join(sorted(versions[k])) if versions[k] else NA])
    t.notes.append("Git revisions, versions and finishing times as each stage's manifest "
                   "recorded them (ingest, shards, training, decoding); several revisions mean "
                   "the stages ran from different code. Config sha256: of the validated config "
                   f"(preset and command line applied) as sorted compact JSON, {CONFIG_FILE} "
                   "beside this page.")
    return t


def discourse_table(models: list[str], consistency: dict | None,
                    contrastive: dict[str, dict], suites: list[str]) -> list[Table]:
    """Lexical consistency per test set and contrastive accuracy per suite, for every model."""
    sets = sorted((consistency or {}).get("results", {}))
    header = ["Model"] + [f"{ts} lexical consistency %" for ts in sets] + \
             [f"{s} accuracy %" for s in suites]
    t = Table("Discourse", header)
    for model in ["reference"] + models:
        row = [model]
        for ts in sets:
            r = consistency["results"][ts].get(model)
            row.append(NA if r is None else f"{fmt(r['consistency'])} ({r['consistent']}/{r['items']})")
        for s in suites:
            r = contrastive.get(model, {}).get("suites", {}).get(s)
            row.append(NA if model == "reference" or r is None else
                       f"{fmt(r['accuracy'])} ({r['correct']}/{r['total']})")
        t.rows.append(row)
    if consistency:
        c = consistency["config"]
        t.notes.append(
            "Lexical consistency: share of source content words repeated within a document "
            "whose Dice-aligned translation is the same word every time (stop list: the "
            f"{c['stop_top_k']} most frequent tokens per side; content words of ≥ "
            f"{c['min_chars']} letters); method in pipeline_lib/evaluate/discourse.py.")
    else:
        t.notes.append(f"Lexical consistency: {NA} (no consistency output).")
    if not suites:
        t.notes.append("Contrastive test suites: none configured (config score.discourse_suites "
                       "is empty), so skipped.")
    tables = [t]
    for s in suites:
        detail = Table(f"Contrastive suite {s}: accuracy % by phenomenon and distance",
                       ["Model", "Group", "Accuracy %", "Correct", "Total"])
        for model in models:
            r = contrastive.get(model, {}).get("suites", {}).get(s)
            if r is None:
                detail.rows.append([model, "all", NA, NA, NA])
                continue
            for kind in ("by_phenomenon", "by_distance"):
                for g, v in r[kind].items():
                    detail.rows.append([model, f"{kind[3:]} {g}", fmt(v["accuracy"]),
                                        fmt(v["correct"]), fmt(v["total"])])
        tables.append(detail)
    return tables


def jobs_table(inputs: Inputs, starts: dict[str, int | None], roles: dict[str, str]) -> Table:
    """Every training job with where it starts on the curves' axis and how it ended."""
    t = Table("Training jobs", ["Job", "Role", "Starts from", "At update", "Updates",
                                "Total updates", "Best dev loss", "At total update",
                                "Last dev BLEU", "Device", "Stopped"])
    for job, run in inputs.train.items():
        m = run.manifest or {}
        steps = m.get("counts", {}).get("steps")
        start = starts[job]
        best = best_update(run)
        bleu = [r["bleu"] for r in run.dev if r.get("bleu") is not None]
        device = f"{m['device']} × {m['world_size']}" if "device" in m else NA
        t.rows.append([job, roles[job], parent_job(inputs.train, job) or "scratch", fmt(start),
                       fmt(steps), fmt(None if start is None or steps is None else start + steps),
                       fmt(m.get("best_dev_loss"), 3),
                       fmt(None if start is None or best is None else start + best),
                       fmt(bleu[-1] if bleu else None), device, stopped(run)])
    t.notes.append("A fine-tune starts from its initial job's checkpoints/best (params.train."
                   "init_from in its manifest), saved at that job's best validation by its stop "
                   "metric (stop.best_step): its updates are counted on from there. Dev BLEU: "
                   "greedy search on the dev set during training (not for models that skip it). "
                   "Stopped: plateau (the stop rule's patience ran out), max_steps (the cap, or "
                   "the fixed budget of the smoke regime); signals: attempts that saved and were "
                   "resumed.")
    return t


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None


def model_table(inputs: Inputs) -> Table:
    """Parameters (and their overhead over the baseline, as the papers report it), training
    speed and decoding speed per evaluated system, from the trainer's manifest ``counts``, its
    train records' ``tokens_per_s`` and the decode manifests' ``counts``."""
    t = Table("Models", ["Model", "Training job", "Parameters", "vs baseline", "Trainable",
                         "Training tokens/s", "Decoding sentences/s", "Decoding tokens/s"])
    base_params = None
    for k, (system, job) in enumerate(inputs.systems.items()):
        run = inputs.train.get(job)
        counts = ((run.manifest if run else None) or {}).get("counts", {})
        params, trainable = counts.get("parameters"), counts.get("trainable_parameters")
        if k == 0:
            base_params = params
        overhead = (f"{100 * (params - base_params) / base_params:+.1f}%"
                    if params and base_params else NA)
        speed = _mean([r.get("tokens_per_s") for r in (run.metrics if run else [])
                       if r.get("split") == "train"])
        decoded = [m.get("counts", {}) for m in inputs.decode.get(system, []) if m is not None]
        t.rows.append([system, job, fmt(params), overhead if k else "", fmt(trainable),
                       fmt(speed, 0), fmt(_mean([d.get("sentences_per_s") for d in decoded]), 1),
                       fmt(_mean([d.get("tokens_per_s") for d in decoded]), 0)])
    t.notes.append("Speeds as measured by the train and decode stages on their hardware "
                   "(training: mean over the logged windows; decoding: mean over test sets). "
                   "Trainable: parameters updated by this job (two-step recipes freeze the "
                   "baseline's).")
    return t


def _split_order(splits: set[str]) -> list[str]:
    order = {s.value: i for i, s in enumerate(Split)}
    return sorted(splits, key=lambda s: (order.get(s, len(order)), s))


def funnel_table(ingest: dict[str, dict | None], shards: dict[str, dict | None]) -> Table:
    """Per corpus: records read, quarantined by the reader by reason, pairs read (per split),
    removed by the hygiene pass by reason and what it found but kept (per split), kept (per
    split), dropped at sharding by reason, and what the training shards hold (per split)."""
    splits = _split_order({s for m in ingest.values() if m
                           for s in m.get("counts", {}).get("sentences", {})})
    t = Table("Data funnel", ["Corpus", "Step", "Records"] + splits)
    for corpus, m in ingest.items():
        def row(step: str, total: Any, per_split: dict | None = None) -> None:
            """One funnel step; split cells only where the step is counted per split, empty
            for a split the corpus does not have."""
            t.rows.append([corpus, step, fmt(total)]
                          + [fmt(per_split[s]) if s in (per_split or {}) else "" for s in splits])

        if m is None:
            row("read at ingest", None)
        else:
            c = m.get("counts", {})
            h = m.get("hygiene") or {}
            removed = h.get("removed") or {}
            kept, quarantined = c.get("kept"), c.get("quarantined")
            row("read at ingest", None if kept is None or quarantined is None
                else kept + quarantined)
            at_reading = {reason: n - sum(removed.get(reason, {}).values())
                          for reason, n in (m.get("rejected") or {}).items()}
            for reason, n in sorted(at_reading.items(), key=lambda x: -x[1]):
                if n:
                    row(f"quarantined at ingest: {reason}", n)
            for repair, n in sorted((m.get("repaired") or {}).items()):
                row(f"repaired at ingest (kept): {repair}", n)
            if c.get("read"):
                row("read: sentence pairs", sum(c["read"].values()), c["read"])
            for label, group in (("removed by hygiene", removed),
                                 ("found by hygiene, kept (split not filtered)", h.get("flagged")),
                                 ("repeats kept inside documents", h.get("kept_in_documents"))):
                for reason, per in sorted((group or {}).items(),
                                          key=lambda x: -sum(x[1].values())):
                    row(f"{label}: {reason}", sum(per.values()), per)
            for pair, kinds in sorted((h.get("overlap") or {}).items()):
                for kind, n in sorted(kinds.items()):
                    row(f"overlap {pair}: {kind}", n)
            row("kept: sentence pairs", kept, c.get("sentences", {}))
            docs = c.get("documents", {})
            row("kept: documents", sum(docs.values()) if docs else None, docs)
        s = shards.get(corpus)
        if s is None:
            row("in the sentence-pair shards", None)
            continue
        for reason, n in sorted((s.get("rejected") or {}).items(), key=lambda x: -x[1]):
            row(f"dropped at sharding: {reason}", n)
        sent = {k.split("/", 1)[1]: v for k, v in s.get("counts", {}).items()
                if k.startswith("sent/")}
        for key, step in (("rows", "in the sentence-pair shards"),
                          ("src_tokens", "shards: source subword tokens"),
                          ("tgt_tokens", "shards: target subword tokens")):
            per = {split: v[key] for split, v in sent.items()}
            row(step, sum(per.values()) if per else None, per)
    t.notes.append("A record is one sentence pair, or one segment that could not be paired. "
                   "Quarantined records and sharding drops are counted per corpus (the "
                   "quarantine does not record a split); the quarantine files keep each "
                   "record with its reason. The hygiene pass (duplicates, dev/test overlap, "
                   "copies, length ratio, language) removes pairs only from the splits it "
                   "filters (train, mono), counts per split what it finds elsewhere, and "
                   "keeps a repeated pair inside a document (its context); overlap rows count "
                   "pairs or documents of the first split found in the second. Sharding drops "
                   "pairs with an empty side or longer than shards.max_len pieces.")
    return t


def stage_table(benchmarks: dict[str, list[dict | None]]) -> Table:
    """Wall time per rule, summed over its jobs, from Snakemake's benchmark files."""
    t = Table("Wall time per stage", ["Rule", "Jobs", "Wall time (sum)", "Longest job",
                                      "CPU time (sum)", "Peak RSS MB"])
    total = 0.0
    for rule, records in benchmarks.items():
        known = [r for r in records if r is not None]
        walls = [r["s"] for r in known if "s" in r]
        total += sum(walls)
        cpu = [r["cpu_time"] for r in known if "cpu_time" in r]
        rss = [r["max_rss"] for r in known if "max_rss" in r]
        missing = len(records) - len(known)
        t.rows.append([rule, f"{len(records)}" + (f" ({missing} {NA})" if missing else ""),
                       hms(sum(walls)) if walls else NA, hms(max(walls)) if walls else NA,
                       hms(sum(cpu)) if cpu else NA, fmt(max(rss), 0) if rss else NA])
    t.rows.append(["all jobs", str(sum(len(r) for r in benchmarks.values())), hms(total), "",
                   "", ""])
    t.notes.append("From benchmarks/<rule>/*.tsv (the rules' Snakemake benchmark files; h:mm:ss). "
                   "Jobs run side by side, so a sum can exceed the time the stage took on the "
                   "clock. The report's own job is not included.")
    return t
