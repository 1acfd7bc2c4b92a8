"""``python -m pipeline_lib.evaluate.report``: the final report, ``index.html`` and ``report.md``,
the one page a researcher reads about a run.

Sections, in order:

0. **Verdict**: the regime (``smoke``: every job trained a fixed budget; ``converged``: every job
   trained to a plateau of its dev metric, stopping.py), then one line per model: does it beat
   its matched control (Δ BLEU, p; across seeds the paired t-test) and does that Δ exceed the
   noise floor; the noise floor itself (the largest BLEU difference between two systems trained
   alike that differ only in the shards they read); a table of every system's updates, target
   tokens and tokens per update, and why its job stopped.
1. **Run**: git revision(s) and library versions the stages recorded, the hash of the validated
   config (written beside the page as ``config.json``), training and decoding devices, when the
   stages finished, the summed job wall time.
2. **BLEU with 95 % intervals**: a plot (``bleu_intervals.png``) and a table of every system's
   test BLEU with the 95 % interval of sacreBLEU's bootstrap, its difference to the baseline and
   to its matched control, each with the paired-bootstrap p-value (``score_test``); with several
   seeds, each system's mean ± sd over seeds and the tests across seeds.
3. **All metrics**: BLEU, METEOR, d-BLEU, chrF, TER per test set, Δ to the baseline, † where
   significant (METEOR has no significance test: no †), and what METEOR is (NLTK, exact +
   stem, not METEOR 1.5) or why it is not meaningful for the target language.
4. **Discourse**: lexical consistency and contrastive suites (``discourse_*``).
5. **Training**: dev loss and dev BLEU against *total* updates (``training_curves.png``): a
   fine-tune is drawn from the update at which the checkpoint it starts from was saved, so a
   two-step recipe reads as one run and a model lines up with its matched control; a table of
   the jobs (initial checkpoint, start, updates, best dev loss, device).
6. **Models**: parameters and their overhead over the baseline, training and decoding speed.
7. **Data**: the funnel of each corpus, records read -> quarantined by reason -> pairs read per
   split -> removed by hygiene by reason (and what it found but kept) -> kept per split ->
   dropped at sharding -> in the training shards (ingest and make_shards manifests).
8. **Wall time per stage**: Snakemake's benchmark file of every job, summed per rule.

Everything shown is read from the files the rule names with flags (``Plan.report_args``),
nothing else: WHY: Snakemake then reruns the report exactly when one of them changes, and every
number on the page traces back to one file. A file a stage did not write, or a field it did not
record, shows as "n/a" rather than failing, so a partial run still gives a readable page. The
same blocks render to Markdown and HTML, so the two files cannot disagree.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import logging
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.atomic import atomic_output, write_text
from pipeline_lib.evaluate.score import SIG_MARK
from pipeline_lib.tables import Split
from pipeline_lib.manifest import Manifest

log = logging.getLogger("report")

NA = "n/a"
BLEU_FILE = "bleu_intervals.png"
CURVES_FILE = "training_curves.png"
CONFIG_FILE = "config.json"


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Text:
    """Paragraphs (the regime statement): plain sentences before the tables."""

    paragraphs: list[str]
    title: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Figure:
    """An image beside ``index.html`` with the sentences that say how to read it."""

    src: str
    alt: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    blocks: list[Table | Figure | Text] = field(default_factory=list)


@dataclass
class TrainRun:
    """One training job as the trainer left it (pipeline_lib.training.train): its
    ``manifest.json`` (None when not written) and the records of its ``metrics.jsonl``."""

    job: str
    manifest_path: Path
    manifest: dict | None
    metrics: list[dict]
    #: the job whose ``checkpoints/best`` it starts from (the plan's ``init_from``), or None
    parent: str | None = None

    @property
    def dev(self) -> list[dict]:
        """Validation records (``split: dev``), in update order."""
        return [r for r in self.metrics if r.get("split") == "dev" and "step" in r]

    @property
    def train_params(self) -> dict:
        return (self.manifest or {}).get("params", {}).get("train", {})

    @property
    def stop(self) -> dict:
        """The trainer's ``stop`` record (reason, updates, rule, best, best_step); {} if none."""
        return (self.manifest or {}).get("stop") or {}


@dataclass
class Inputs:
    """Everything the report reads, each from the file one flag names (None/empty = not read)."""

    scores: dict | None
    consistency: dict | None
    contrastive: dict[str, dict]
    suites: list[str]
    systems: dict[str, str]                  # evaluated system -> its training job, report order
    train: dict[str, TrainRun]               # every training job (controls, pre-training too)
    decode: dict[str, list[dict | None]]     # system -> its decode manifests, one per test set
    ingest: dict[str, dict | None]           # corpus -> ingest manifest
    shards: dict[str, dict | None]           # corpus -> make_shards manifest
    benchmarks: dict[str, list[dict | None]]  # rule -> one record per job
    config: dict


# ------------------------------------------------------------------------------------------------
# defensive readers
# ------------------------------------------------------------------------------------------------

def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        log.warning("%s: not read (%s)", path, e)
        return None


def read_metrics(path: Path) -> list[dict]:
    """Training curve records; unreadable lines are skipped with a warning naming the line."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        log.warning("%s: not read (%s)", path, e)
        return out
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s:%d: not JSON, skipped", path, i)
    return out


def read_benchmark(path: Path) -> dict[str, float] | None:
    """The numbers of a Snakemake benchmark file's first record (``s`` wall seconds,
    ``max_rss`` MB, ``cpu_time`` s, ...). Snakemake writes ``NA`` for what it could not measure
    (a job faster than its sampling interval): those fields are left out."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        log.warning("%s: not read (%s)", path, e)
        return None
    if len(lines) < 2:
        log.warning("%s: no benchmark record", path)
        return None
    record = {}
    for key, value in zip(lines[0].split("\t"), lines[1].split("\t")):
        try:
            record[key] = float(value)
        except ValueError:   # NA, and h:m:s (the same time as s)
            continue
    return record


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return NA
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def hms(seconds: float | None) -> str:
    """Seconds as h:mm:ss, the benchmark files' own notation."""
    if seconds is None:
        return NA
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None


def _split_order(splits: set[str]) -> list[str]:
    order = {s.value: i for i, s in enumerate(Split)}
    return sorted(splits, key=lambda s: (order.get(s, len(order)), s))


# ------------------------------------------------------------------------------------------------
# training chains: where each job starts on the total-updates axis
# ------------------------------------------------------------------------------------------------

def best_update(run: TrainRun) -> int | None:
    """The update at which the job's ``checkpoints/best`` was saved: the manifest's
    ``stop.best_step``; for a manifest without it, the first validation with the lowest dev
    loss (the trainer's criterion before it had a stop rule)."""
    if run.stop.get("best_step") is not None:
        return run.stop["best_step"]
    dev = [r for r in run.dev if r.get("loss") is not None]
    return min(dev, key=lambda r: r["loss"])["step"] if dev else None


def start_updates(runs: dict[str, TrainRun]) -> dict[str, int | None]:
    """Updates made before each job's first one, counting along its chain of parents.

    A fine-tune's step counter restarts at 0 and it starts from its parent's ``best`` (the plan
    gives every fine-tune its parent's ``best``), so a job starts at its parent's start plus the
    parent's :func:`best_update`. 0 for a job trained from scratch; None where that cannot be
    told (no manifest, a parent that is not among the inputs, a parent without dev records)."""
    starts: dict[str, int | None] = {}

    def start(job: str) -> int | None:
        if job not in starts:
            run = runs[job]
            if run.manifest is None:
                starts[job] = None
            elif run.parent is None:
                starts[job] = 0
            else:
                base = start(run.parent) if run.parent in runs else None
                saved = best_update(runs[run.parent]) if base is not None else None
                starts[job] = None if saved is None else base + saved
        return starts[job]

    for job in runs:
        start(job)
    return starts


def parent_job(runs: dict[str, TrainRun], job: str) -> str | None:
    """The job whose checkpoint ``job`` starts from, if any."""
    return runs[job].parent


def job_roles(inputs: Inputs) -> dict[str, str]:
    """Training job -> baseline | control | model | initialises (a job that is no evaluated
    system, only other jobs start from it: cross-task pre-training). Controls are evaluated
    systems too: the scores' ``controls`` tell them apart."""
    systems = list(inputs.systems.values())
    controls = {inputs.systems.get(c, c)
                for c in ((inputs.scores or {}).get("controls") or {}).values()}
    groups = system_groups(inputs)
    first = next(iter(inputs.systems), None)
    baselines = {job for system, job in inputs.systems.items()   # the baseline of every seed
                 if first is not None and groups[system] == groups[first]}
    roles = {}
    for job in inputs.train:
        roles[job] = ("baseline" if job in baselines else
                      "control" if job in controls else
                      "model" if job in systems else "initialises")
    return roles


def system_groups(inputs: Inputs) -> dict[str, str]:
    """Evaluated system -> the system it is a seed's run of (``doct_seed2`` -> ``doct``; the
    scores' ``replicates``), itself in a single-seed run."""
    replicates = (inputs.scores or {}).get("replicates") or {}
    return {s: replicates.get(s, [s])[0] for s in inputs.systems}


def regime(runs: dict[str, TrainRun]) -> str:
    """``converged`` when every training job ran under a plateau rule (``train.patience`` > 0),
    else ``smoke`` (at least one job trained a fixed number of updates)."""
    known = [r.train_params for r in runs.values() if r.manifest is not None]
    return "converged" if known and all((p.get("patience") or 0) > 0 for p in known) else "smoke"


def stopped(run: TrainRun | None) -> str:
    """Why a job stopped and after how many updates (``plateau @ 2,300``)."""
    if run is None or run.manifest is None:
        return NA
    st = run.stop
    if not st:
        return NA
    out = f"{st['reason']} @ {fmt(st.get('updates'))}"
    if st.get("interruptions"):
        out += f" ({len(st['interruptions'])} signal(s))"
    return out


# ------------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------------

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


def baseline_of(scores: dict, system: str) -> str:
    """The baseline ``system`` is tested against: the run's, or with several seeds the same
    seed's run of it (score.seed_groups)."""
    reps = scores.get("replicates") or {}
    if system not in reps:
        return scores["baseline"]
    group, seed = reps[scores["baseline"]][0], reps[system][1]
    return next(s for s, (g, n) in reps.items() if g == group and n == seed)


def bleu_table(scores: dict) -> Table:
    """Every system's BLEU with its 95 % bootstrap interval, against the baseline and against
    its matched control, each with the paired bootstrap's p-value."""
    level = scores["config"]["significance_level"]
    t = Table("BLEU with 95 % intervals",
              ["Test set", "System", "BLEU", "95 % interval", "Δ baseline", "p",
               "Matched control", "Δ control", "p (control)"])
    for ts in scores["test_sets"]:
        rows = scores["results"][ts]["models"]
        for system in scores["models"]:
            r = rows.get(system)
            if r is None:
                t.rows.append([ts, system] + [NA] * 7)
                continue
            ci = r.get("bleu_ci")
            interval = NA if ci is None else f"{ci[0] - ci[1]:.2f} – {ci[0] + ci[1]:.2f}"
            vs_base = ["", ""]
            base = baseline_of(scores, system)
            if system != base:
                vs_base = [f"{r['bleu'] - rows[base]['bleu']:+.2f}"
                           + (SIG_MARK if r.get("bleu_significant") else ""),
                           fmt(r.get("bleu_p"), 4)]
            c = r.get("control")
            vs_control = (["", "", ""] if c is None else
                          [c["system"], f"{c['bleu_delta']:+.2f}"
                           + (SIG_MARK if c["bleu_significant"] else ""), fmt(c["bleu_p"], 4)])
            t.rows.append([ts, system + (" (baseline)" if system == base else ""),
                           f"{r['bleu']:.2f}", interval, *vs_base, *vs_control])
    t.notes.append(f"95 % interval: sacreBLEU's bootstrap resampling of the test sentences "
                   f"({scores['config']['bootstrap_samples']} samples), mean ± half the "
                   "distance between the 2.5th and 97.5th percentiles; the point is the BLEU of "
                   "the whole test set.")
    t.notes.append(f"Δ: BLEU difference; {SIG_MARK}: p < {level} in sacreBLEU's paired "
                   "bootstrap against the baseline (or against the control; with several "
                   "seeds, the same seed's). Matched control: "
                   "the Transformer job with the same translation updates on the same sentence "
                   "pairs without the model's method (pipeline_lib/plan.py); a gain counts only "
                   "where it holds against the control.")
    return t


def verdict_test_set(scores: dict) -> str:
    """The test set a verdict is read on: ``All`` when there are several, else the only one."""
    return scores["test_sets"][-1]


def regime_text(inputs: Inputs) -> Text:
    """What the verdicts below are about: the regime and, when converged, the rule and any job
    that reached its cap first."""
    runs = {j: r for j, r in inputs.train.items() if r.manifest is not None}
    if regime(inputs.train) == "smoke":
        return Text(["Regime: smoke. Every job trained a fixed number of updates "
                     "(train.patience 0): a verdict says whether a model beats its matched "
                     "control at this budget, not whether the paper's claim holds; a baseline "
                     "stopped while its dev loss still falls leaves its control the gains of "
                     "further training."])
    rules = Counter(f"dev {p.get('stop_metric', 'loss')}, patience {p.get('patience')} "
                    f"validations, min_delta {p.get('min_delta', 0.0)}"
                    for r in runs.values() if (p := r.train_params))
    capped = [j for j, r in runs.items() if r.stop.get("reason") == "max_steps"]
    text = ["Regime: converged. Every job trained until its dev metric stopped improving "
            f"({'; '.join(f'{rule} ({n} jobs)' for rule, n in rules.items())}; each job "
            "capped by its max_steps); a fine-tune and its matched control each trained to its "
            "own plateau under the same rule from the same checkpoint, so a verdict compares "
            "the method with the baseline trained on until it no longer gains."]
    if capped:
        text.append(f"Not converged: {len(capped)} job(s) reached their max_steps cap before a "
                    f"plateau: {', '.join(capped)}.")
    return Text(text)


def _updates(inputs: Inputs, systems: list[str]) -> str:
    """Updates of the systems' jobs (one, or each seed's)."""
    steps = []
    for system in systems:
        run = inputs.train.get(inputs.systems.get(system, system))
        steps.append(((run.manifest if run else None) or {}).get("counts", {}).get("steps"))
    return "/".join(fmt(x) for x in steps)


def verdict_table(inputs: Inputs) -> Table:
    """One line per model with a matched control: does it beat it on the test set (the paired
    bootstrap with one seed; the paired t-test across seeds with several), by how much, whether
    that Δ exceeds the noise floor (:func:`noise_floor`: a Δ within it could be the shards
    alone), in which regime, after how many updates of each."""
    scores = inputs.scores or {}
    t = Table("Verdict", ["Model", "Verdict", "Δ BLEU vs control", "p", "Exceeds noise floor",
                          "Matched control", "Updates: model", "Updates: control",
                          "Stopped: model / control"])
    if not scores:
        t.notes.append(f"Scores: {NA} (not read).")
        return t
    ts = verdict_test_set(scores)
    res = scores["results"][ts]
    level = scores["config"]["significance_level"]
    controls = scores.get("controls") or {}
    groups = system_groups(inputs)
    mode = regime(inputs.train)
    roles = job_roles(inputs)
    floor = noise_floor(noise_pairs(inputs))
    seen: set[str] = set()
    for system in scores["models"]:
        group = groups.get(system, system)
        if group in seen or roles.get(inputs.systems.get(system, system)) != "model":
            continue
        seen.add(group)
        members = [s for s in scores["models"] if groups.get(s, s) == group]
        if system not in controls:
            t.rows.append([group, f"no matched control ({mode})", "", "", NA, "",
                           _updates(inputs, members), "", "; ".join(
                               stopped(inputs.train.get(inputs.systems.get(x, x)))
                               for x in members)])
            continue
        ctrl = [controls[s] for s in members]
        if "seeds" in res and group in res["seeds"] and "control" in res["seeds"][group]:
            c = res["seeds"][group]["control"]
            delta = f"{c['mean']:+.2f}" + (f" ± {c['sd']:.2f}" if c["sd"] is not None else "") + \
                f" ({c['seeds']} seeds, {c['wins']} better)"
            p, significant, mean = c["p"], c["significant"], c["mean"]
            test = "paired t-test across seeds"
            ctrl_name = c["group"]
        else:
            c = res["models"][system].get("control")
            if c is None:
                continue
            delta, p, significant, mean = (f"{c['bleu_delta']:+.2f}", c["bleu_p"],
                                           c["bleu_significant"], c["bleu_delta"])
            test = "paired bootstrap"
            ctrl_name = c["system"]
        if significant and mean > 0:
            verdict = "beats its control"
        elif significant and mean < 0:
            verdict = "does not beat its control: significantly worse"
        else:
            verdict = "does not beat its control: no significant difference"
        verdict += f" ({mode})"
        jobs = [inputs.train.get(inputs.systems.get(x, x)) for x in members + ctrl]
        capped = sorted({r.job for r in jobs if r is not None and
                         r.stop.get("reason") == "max_steps"})
        if mode == "converged" and capped:
            verdict += f"; not converged: {', '.join(capped)} hit max_steps"
        stops = " / ".join("; ".join(stopped(inputs.train.get(inputs.systems.get(x, x)))
                                     for x in side) for side in (members, ctrl))
        t.rows.append([group, verdict, delta, "n/a" if p is None else f"{p:.4f} ({test})",
                       exceeds(mean, floor), ctrl_name, _updates(inputs, members),
                       _updates(inputs, ctrl), stops])
    t.notes.append(f"On test set {ts}; significant: p < {level}. With one seed the p-value is "
                   "sacreBLEU's paired bootstrap of the model against its matched control; with "
                   "several, a paired t-test of the per-seed differences (each seed's model "
                   "against the same seed's control) and 'better' counts the seeds where the "
                   "model scored higher (section 'Across seeds'). Exceeds noise floor: "
                   "whether the Δ (with several seeds, its mean) is larger than the noise floor "
                   "below; n/a without a floor or a control.")
    return t


# ------------------------------------------------------------------------------------------------
# noise floor: systems trained alike that differ only in the shards they read
# ------------------------------------------------------------------------------------------------

@dataclass
class NoisePair:
    """Two evaluated systems whose training jobs differ only in their data, with their BLEU on
    the verdict's test set."""

    first: str
    second: str
    bleu: tuple[float, float]
    p: float | None                      # the scores' paired bootstrap of the two, if any
    reads: tuple[list[str], list[str]]   # what each read that the other did not (input paths)

    @property
    def delta(self) -> float:
        """|Δ BLEU|, at the scores' two decimals (a floor of 1.46, not 1.4600000000000009)."""
        return round(abs(self.bleu[0] - self.bleu[1]), 2)


def data_inputs(run: TrainRun | None) -> dict[str, str] | None:
    """What a job read besides its initial checkpoint: its manifest's inputs (path -> sha256 of
    the shards, dev shards, aux shards and SentencePiece model), which name the shards the plan
    gave it (data and corpus) and pin their content. None where not recorded (no manifest, no
    inputs): two such jobs cannot be shown to differ in their data alone."""
    if run is None or run.manifest is None:
        return None
    init = run.train_params.get("init_from")
    read = {path: h for path, h in (run.manifest.get("inputs") or {}).items() if path != init}
    return read or None


def differ_only_in_data(a: TrainRun | None, b: TrainRun | None) -> bool:
    """Whether two jobs trained the same model config with the same train settings (seed,
    updates, stop rule and the initial checkpoint among them) from the same parent job, on
    different data. WHY: their BLEU gap then measures which shards they read (and training's
    nondeterminism), nothing an experiment varies on purpose: the noise a model-vs-control Δ
    has to clear."""
    da, db = data_inputs(a), data_inputs(b)
    if da is None or db is None or da == db:
        return False
    pa, pb = a.manifest.get("params") or {}, b.manifest.get("params") or {}
    return (a.parent == b.parent and pa.get("model") is not None and pa.get("train") is not None
            and pa.get("model") == pb.get("model") and pa.get("train") == pb.get("train"))


def pair_p(scores: dict, ts: str, a: str, b: str) -> float | None:
    """The paired bootstrap p of ``a`` and ``b`` where score_test ran that test: one is the
    other's matched control or its baseline. score_test tests no other pair, so None (n/a)
    otherwise rather than a number the scores do not hold."""
    rows = scores["results"][ts]["models"]
    for x, y in ((a, b), (b, a)):
        c = rows[x].get("control")
        if c is not None and c.get("system") == y:
            return c.get("bleu_p")
        if baseline_of(scores, x) == y:
            return rows[x].get("bleu_p")
    return None


def _variant(system: str, job: str) -> str:
    """How a system decodes its job: "" for the job's own row, ``_sent`` for ``<job>_sent``; a
    pair decoded differently would differ in more than its data."""
    return system[len(job):] if system.startswith(job) else system


def noise_pairs(inputs: Inputs) -> list[NoisePair]:
    """Every pair of evaluated systems, decoded alike, whose jobs differ only in their data
    (:func:`differ_only_in_data`), in the scores' order. WHY: the plan gives each model a
    control on the model's own shards, so a model on document shards and one on the parsed
    subset get two controls from the same checkpoint with the same updates that differ in
    nothing else (``transformer_plus150_doc``, ``transformer_plus150_heads``)."""
    scores = inputs.scores
    if not scores:
        return []
    ts = verdict_test_set(scores)
    rows = scores["results"][ts]["models"]
    systems = [s for s in scores["models"] if "bleu" in rows.get(s, {})]
    pairs = []
    for i, a in enumerate(systems):
        for b in systems[i + 1:]:
            ja, jb = inputs.systems.get(a, a), inputs.systems.get(b, b)
            ra, rb = inputs.train.get(ja), inputs.train.get(jb)
            if ja == jb or _variant(a, ja) != _variant(b, jb) or not differ_only_in_data(ra, rb):
                continue
            da, db = data_inputs(ra), data_inputs(rb)
            reads = ([p for p, h in sorted(da.items()) if db.get(p) != h],
                     [p for p, h in sorted(db.items()) if da.get(p) != h])
            pairs.append(NoisePair(a, b, (rows[a]["bleu"], rows[b]["bleu"]),
                                   pair_p(scores, ts, a, b), reads))
    return pairs


def noise_floor(pairs: list[NoisePair]) -> float | None:
    """The largest |Δ BLEU| of the pairs: a Δ no larger could be the shards alone. None
    without a pair (no number is made up)."""
    return max((p.delta for p in pairs), default=None)


def exceeds(delta: float | None, floor: float | None) -> str:
    """yes / no: whether a Δ against a control is larger than the noise floor (both at the
    scores' two decimals, so a tie is no); n/a without either."""
    if delta is None or floor is None:
        return NA
    return "yes" if round(abs(delta), 2) > floor else "no"


def noise_floor_block(inputs: Inputs) -> Table | Text:
    """The noise floor, shown after the verdict: each pair (BLEU each, |Δ|, p) and the largest
    |Δ| as the floor in one sentence; one line saying there is none where no pair exists."""
    if not inputs.scores:
        return Text([f"Noise floor: {NA} (scores not read)."])
    pairs = noise_pairs(inputs)
    if not pairs:
        return Text(["Noise floor: none measured: no pair of controls differing only in their "
                     "shards (no two evaluated systems trained alike from the same checkpoint "
                     "on different shards)."])
    ts, floor = verdict_test_set(inputs.scores), noise_floor(pairs)
    t = Table("Noise floor", ["Pair", "BLEU each", "Absolute Δ BLEU", "p"],
              [[f"{p.first} vs {p.second}", f"{p.bleu[0]:.2f} / {p.bleu[1]:.2f}",
                f"{p.delta:.2f}", fmt(p.p, 4)] for p in pairs])
    t.notes.append(f"Noise floor: {floor:.2f} BLEU on {ts}, the largest difference between two "
                   "systems that differ only in the shards they read; a model's Δ against its "
                   "control no larger than it (Exceeds noise floor: no) is within what the "
                   "choice of shards alone moves.")
    t.notes.append("A pair: two evaluated systems, decoded alike, whose training jobs have the "
                   "same model config, train settings (seed, updates, stop rule, initial "
                   "checkpoint) and parent job, and read different inputs (their manifests' "
                   "inputs besides the initial checkpoint). p: sacreBLEU's paired bootstrap "
                   "where score_test tested the two (one is the other's control or baseline), "
                   f"else {NA}. With several seeds every seed's pair counts.")
    t.notes += [f"{p.first} reads {', '.join(p.reads[0]) or NA}; {p.second} reads "
                f"{', '.join(p.reads[1]) or NA}." for p in pairs]
    return t


def budget_table(inputs: Inputs, starts: dict[str, int | None]) -> Table:
    """Every evaluated system's training budget: its job's updates and target tokens, tokens
    per update, where it started, why it stopped, and the schedule it ran (learning rate,
    warm-up, max_steps and stop rule from ``params.train`` in its manifest): what a reader needs
    to see whether a model and its control had the same budget, and what ran."""
    roles = job_roles(inputs)
    t = Table("Budgets: updates and target tokens",
              ["System", "Role", "Training job", "Updates", "Target tokens", "Tokens / update",
               "Starts at update", "Total updates", "Stopped", "LR", "Warm-up", "Max steps",
               "Stop rule"])
    evaluated = set(inputs.systems.values())
    rows = [*inputs.systems.items(),   # then the jobs no system is (pre-training), as "—"
            *(("—", job) for job in inputs.train if job not in evaluated)]
    for system, job in rows:
        run = inputs.train.get(job)
        counts = ((run.manifest if run else None) or {}).get("counts", {})
        steps, tokens = counts.get("steps"), counts.get("target_tokens")
        start = starts.get(job)
        p = run.train_params if run else {}
        t.rows.append([system, roles.get(job, NA), job, fmt(steps), fmt(tokens),
                       fmt(tokens / steps, 0) if steps and tokens is not None else NA,
                       fmt(start), fmt(None if start is None or steps is None else start + steps),
                       stopped(run), NA if p.get("lr") is None else f"{p['lr']:.3g}",
                       fmt(p.get("warmup")), fmt(p.get("max_steps")), stop_rule(p)])
    t.notes.append("Updates and target tokens of the system's own training job (counts.steps, "
                   "counts.target_tokens in its manifest; tokens: target subwords trained on, "
                   "padding excluded); a fine-tune's job starts from its initial job's best "
                   "checkpoint, at the update given. A model and its matched control train the "
                   "same number of updates in the smoke regime; in the converged regime each "
                   "stops on its own plateau, so their budgets differ and are shown here. LR: "
                   "the peak learning rate, reached after the warm-up updates; Max steps: the "
                   "job's cap (its fixed budget where the stop rule is fixed); Stop rule: "
                   "fixed (train.patience 0) or the dev plateau it stops on. System —: a "
                   "training job no system is, that others start from (role initialises).")
    return t


def stop_rule(params: dict) -> str:
    """A job's stop rule from its ``params.train``: ``fixed`` (patience 0: it trains max_steps)
    or ``plateau: dev loss, patience 10``."""
    if not params:
        return NA
    if not params.get("patience"):
        return "fixed"
    return f"plateau: dev {params.get('stop_metric', 'loss')}, patience {params['patience']}"


def seeds_table(scores: dict) -> Table | None:
    """Per system (a group of seeds' runs): BLEU per seed, mean ± sd, each seed's paired
    bootstrap against its control, the paired t-test across seeds against the control and the
    baseline. None in a single-seed run."""
    if not scores.get("replicates"):
        return None
    t = Table("Across seeds", ["Test set", "System", "Seeds", "BLEU per seed", "Mean ± sd",
                               "Δ control per seed (p)", "Δ control mean ± sd", "p (t-test)",
                               "Δ baseline mean ± sd", "p (t-test, baseline)"])

    def mean_sd(c: dict) -> str:
        return f"{c['mean']:+.2f}" + (f" ± {c['sd']:.2f}" if c.get("sd") is not None else "")

    for ts in scores["test_sets"]:
        for group, e in scores["results"][ts].get("seeds", {}).items():
            c, b = e.get("control"), e.get("baseline")
            t.rows.append([
                ts, group, ", ".join(map(str, e["seeds"])), ", ".join(f"{x:.2f}" for x in e["bleu"]),
                f"{e['mean']:.2f}" + (f" ± {e['sd']:.2f}" if e["sd"] is not None else ""),
                "" if c is None else ", ".join(f"{d:+.2f} ({p:.3f})" for d, p in
                                               zip(c["deltas"], c["per_seed_p"])),
                "" if c is None else mean_sd(c),
                "" if c is None else fmt(c["p"], 4) + (SIG_MARK if c["significant"] else ""),
                "" if b is None else mean_sd(b),
                "" if b is None else fmt(b["p"], 4) + (SIG_MARK if b["significant"] else "")])
    t.notes.append("sd: sample standard deviation over seeds. Each seed's model is compared "
                   "with the same seed's control and baseline (they share its initial "
                   "checkpoint and data order); p per seed: sacreBLEU's paired bootstrap; "
                   "p (t-test): Student's paired t-test of the per-seed differences, df = seeds "
                   f"- 1; {SIG_MARK}: p < {scores['config']['significance_level']}.")
    return t


def results_table(scores: dict) -> Table:
    """Models x test sets with BLEU / METEOR / d-BLEU / chrF / TER, delta to the baseline and
    daggers (none for METEOR, which score_test does not resample)."""
    base = scores["baseline"]
    sets = scores["test_sets"]
    metrics = [("bleu", "BLEU"), ("meteor", "METEOR"), ("dbleu", "d-BLEU"), ("chrf", "chrF"),
               ("ter", "TER")]
    controls = scores.get("controls", {})
    header = ["Model", "Matched control"] + [f"{ts} {label}" for ts in sets for _, label in metrics]
    if controls:
        header += [f"{ts} {label} vs control" for ts in sets for label in ("BLEU", "d-BLEU")]
    t = Table("All metrics", header)
    control_rows = set(controls.values())
    for model in scores["models"]:
        own = baseline_of(scores, model)
        name = (f"{model} (baseline)" if model == own else
                f"{model} (control)" if model in control_rows else model)
        row = [name, controls.get(model, "")]
        for ts in sets:
            r = scores["results"][ts]["models"].get(model, {})
            b = scores["results"][ts]["models"].get(own, {})
            for key, _ in metrics:
                if r.get(key) is None:
                    row.append(NA)
                    continue
                cell = f"{r[key]:.2f}"
                if model != own and b.get(key) is not None:
                    cell += f" ({r[key] - b[key]:+.2f})"
                    if r.get(f"{key}_significant"):
                        cell += SIG_MARK
                row.append(cell)
        if controls:
            for ts in sets:
                c = scores["results"][ts]["models"].get(model, {}).get("control")
                for key in ("bleu", "dbleu"):
                    row.append("" if c is None else
                               f"{c[f'{key}_delta']:+.2f}{SIG_MARK if c[f'{key}_significant'] else ''}")
        t.rows.append(row)
    level = scores["config"]["significance_level"]
    t.notes.append(f"Δ in parentheses: difference to the baseline {base}"
                   + (" (with several seeds: the same seed's run of it)"
                      if scores.get("replicates") else "") + f"; {SIG_MARK}: "
                   f"p < {level} in sacreBLEU's paired bootstrap resampling "
                   f"({scores['config']['bootstrap_samples']} samples) against the baseline. "
                   "TER: lower is better. d-BLEU: BLEU over documents (sentences joined).")
    if controls:
        t.notes.append("'vs control' columns: the difference to the matched control, "
                       f"{SIG_MARK} where the paired bootstrap against the control has p < "
                       f"{level}.")
    for ts in sets:
        n = scores["results"][ts]
        t.notes.append(f"{ts}: {n['sentences']:,} sentences, {n['documents']:,} documents, "
                       f"{n['references']} reference(s).")
    meteor = scores.get("meteor")
    if meteor is not None:
        lang = meteor.get("tgt_lang") or "not given"
        if not meteor.get("meaningful", True):
            t.notes.append(f"METEOR not meaningful for the target language ({lang}): "
                           f"{meteor['note']}.")
        else:
            t.notes.append(
                f"METEOR: {meteor['implementation']}, modules {' + '.join(meteor['modules'])} "
                f"(stemmer {meteor['stemmer'] or 'none'}; target language {lang}; "
                f"{meteor['note']}), alpha {meteor['alpha']}, beta {meteor['beta']}, gamma "
                f"{meteor['gamma']}, 13a tokens lowercased, statistics summed over the test set "
                "(x 100); no significance test, so no †. Not METEOR 1.5 (Denkowski & Lavie "
                "2014), which adds synonym and paraphrase modules, language-tuned parameters and "
                "module weights: not comparable with a paper's METEOR.")
    first = scores["results"][sets[0]]["models"][base]
    for key, label in metrics:
        if f"{key}_signature" in first:
            t.notes.append(f"{label} signature: {first[f'{key}_signature']}")
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


# ------------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_bleu(scores: dict | None, colours: dict[str, Any], roles: dict[str, str],
              out: Path) -> None:
    """Each system's test BLEU (point) with its 95 % bootstrap interval (bar), one panel per
    test set, the baseline's BLEU as a dashed line: whether intervals overlap is seen at a
    glance, which a column of numbers hides. ``colours``: a system's curve colour (a model and
    its control share one; the control's point is hollow)."""
    plt = _pyplot()
    sets = (scores or {}).get("test_sets", [])
    systems = (scores or {}).get("models", [])
    cols = max(1, min(3, len(sets)))
    rows = max(1, math.ceil(len(sets) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 + 4.2 * cols,
                                                  (0.8 + 0.36 * max(len(systems), 3)) * rows),
                             squeeze=False, sharey=True)
    for ax, ts in zip(axes.flat, sets):
        res = scores["results"][ts]["models"]
        for y, system in enumerate(systems):
            r = res.get(system)
            if r is None:
                continue
            c = colours.get(system, "tab:blue")
            ci = r.get("bleu_ci")
            if ci is not None:
                ax.plot([ci[0] - ci[1], ci[0] + ci[1]], [y, y], color=c, lw=3, alpha=0.45,
                        solid_capstyle="butt")
            ax.plot([r["bleu"]], [y], "o", color=c, markersize=6,
                    markerfacecolor="white" if roles.get(system) == "control" else c)
            ax.annotate(f"{r['bleu']:.2f}", (r["bleu"], y), xytext=(0, 5),
                        textcoords="offset points", ha="center", fontsize=8)
        if scores["baseline"] in res:
            ax.axvline(res[scores["baseline"]]["bleu"], color="black", ls="--", lw=0.8)
        ax.set_xlim(left=max(0.0, ax.get_xlim()[0]))   # BLEU is never negative
        ax.set_title(ts, fontsize=10)
        ax.set_xlabel("BLEU")
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[max(len(sets), 1):]:
        ax.set_visible(False)
    ax0 = axes.flat[0]
    if systems:
        ax0.set_yticks(range(len(systems)))
        ax0.set_yticklabels([f"{s} ({roles[s]})" if roles.get(s) in ("baseline", "control")
                             else s for s in systems])
        ax0.set_ylim(len(systems) - 0.5, -0.7)
    else:
        ax0.text(0.5, 0.5, NA, ha="center", va="center", transform=ax0.transAxes)
    fig.tight_layout()
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def curve_styles(inputs: Inputs, roles: dict[str, str]
                 ) -> dict[str, tuple[tuple[int, int], Any, str]]:
    """((family, rank), colour, line style) of each training job's curve. A model's colour is
    shared by its matched control (dashed) and by the jobs the two start from (dotted), so a
    model reads against its control and a two-step recipe as one family (and every seed's run of
    a model shares its colour); the baseline is black
    (family -1), jobs of no family grey. (family, rank) orders the legend: model, control,
    the jobs they start from."""
    import matplotlib

    palette = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]  # 7: grey
    groups = system_groups(inputs)
    ids: dict[str, int] = {}       # system group -> family: every seed's run of a model shares it
    family: dict[str, int] = {}    # job -> family
    for system, job in inputs.systems.items():
        if roles.get(job) == "model" and job not in family:
            family[job] = ids.setdefault(groups[system], len(ids))
    for system, control in ((inputs.scores or {}).get("controls") or {}).items():
        job = inputs.systems.get(system)
        if job in family:   # a control is a system of its own, trained as the job of its name
            family.setdefault(inputs.systems.get(control, control), family[job])
    for job in list(family):
        parent = parent_job(inputs.train, job)
        while parent in inputs.train and parent not in family and roles[parent] == "initialises":
            family[parent] = family[job]
            parent = parent_job(inputs.train, parent)
    line = {"control": "--", "initialises": ":"}
    rank = {"model": 0, "control": 1, "initialises": 2}
    styles = {}
    for job in inputs.train:
        key = (family.get(job, len(ids)), rank.get(roles[job], 0))
        if roles[job] == "baseline":
            styles[job] = ((-1, 0), "black", "-")
        elif job in family:
            styles[job] = (key, palette[family[job] % len(palette)], line.get(roles[job], "-"))
        else:
            styles[job] = (key, "tab:gray", line.get(roles[job], "-"))
    return styles


def plot_curves(runs: dict[str, TrainRun], starts: dict[str, int | None],
                styles: dict[str, tuple[tuple[int, int], Any, str]], out: Path) -> list[str]:
    """Dev loss and dev BLEU against total updates, one line per training job (styles: see
    :func:`curve_styles`); returns the jobs without dev records."""
    plt = _pyplot()
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(12, 4.6))
    missing = []
    handles = {}
    for job, run in sorted(runs.items(), key=lambda kv: styles[kv[0]][0]):
        if not run.dev:
            missing.append(job)
            continue
        _, colour, ls = styles[job]
        start = starts[job] or 0
        label = job + ("" if starts[job] is not None else " (start unknown)")
        kw = dict(color=colour, ls=ls, marker="o", markersize=3.5, label=label,
                  lw=2.2 if colour == "black" else 1.5)
        loss = [(start + r["step"], r["loss"]) for r in run.dev if r.get("loss") is not None]
        bleu = [(start + r["step"], r["bleu"]) for r in run.dev if r.get("bleu") is not None]
        for ax, points in ((ax_loss, loss), (ax_bleu, bleu)):
            if points:
                handles[label] = ax.plot(*zip(*points), **kw)[0]
    for ax, label in ((ax_loss, "dev loss"), (ax_bleu, "dev BLEU (greedy)")):
        ax.set_xlabel("total updates (a fine-tune continues its initial checkpoint's count)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if not ax.get_lines():
            ax.text(0.5, 0.5, NA, ha="center", va="center", transform=ax.transAxes)
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="lower center",
                   ncol=min(4, len(handles)), fontsize=9, frameon=False)
    rows = math.ceil(len(handles) / 4) if handles else 0
    fig.tight_layout(rect=(0, 0.06 * rows + 0.02 * bool(rows), 1, 1))
    with atomic_output(out) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return missing


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------

def to_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for section in sections:
        out += [f"## {section.title}", ""]
        for b in section.blocks:
            if isinstance(b, Figure):
                out += [f"![{b.alt}]({b.src})", ""]
            elif isinstance(b, Text):
                out += [line for p in b.paragraphs for line in (p, "")]
            else:
                if b.title != section.title:
                    out += [f"### {b.title}", ""]
                out += ["| " + " | ".join(b.header) + " |", "|" + "---|" * len(b.header)]
                out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
                        for r in b.rows]
                out.append("")
            out += [f"- {n}" for n in b.notes] + ([""] if b.notes else [])
    return "\n".join(out)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1300px;padding:0 1em;
color:#222}h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
nav a{margin-right:1em}.wide{overflow-x:auto}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums;font-size:14px}
td,th{border:1px solid #bbb;padding:3px 8px;text-align:left;white-space:nowrap}
th{background:#eee;white-space:normal;vertical-align:bottom}.num{text-align:right}
tr:nth-child(even){background:#f8f8f8}
.notes{font-size:13px;color:#444;max-width:1100px}figure{margin:1em 0}img{max-width:100%}"""


def _numeric_columns(t: Table) -> list[bool]:
    """Columns whose every known cell starts with a number: right-aligned, text left."""
    return [all(c == "" or c.startswith(NA) or re.match(r"[+-]?\d", c) for c in column)
            for column in zip(*t.rows)] if t.rows else [False] * len(t.header)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower())


def to_html(title: str, sections: list[Section]) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
           "<nav>" + "".join(f'<a href="#{_slug(s.title)}">{e(s.title)}</a>' for s in sections)
           + "</nav>"]
    for section in sections:
        out.append(f'<h2 id="{_slug(section.title)}">{e(section.title)}</h2>')
        for b in section.blocks:
            if isinstance(b, Figure):
                out.append(f'<figure><img src="{e(b.src)}" alt="{e(b.alt)}"></figure>')
            elif isinstance(b, Text):
                out += [f"<p>{e(p)}</p>" for p in b.paragraphs]
            else:
                if b.title != section.title:
                    out.append(f"<h3>{e(b.title)}</h3>")
                num = _numeric_columns(b)
                td = ['<td class="num">' if n else "<td>" for n in num]
                out.append('<div class="wide"><table><thead><tr>'
                           + "".join(f'<th class="num">{e(h)}</th>' if n else f"<th>{e(h)}</th>"
                                     for h, n in zip(b.header, num))
                           + "</tr></thead><tbody>")
                out += ["<tr>" + "".join(f"{d}{e(c)}</td>" for d, c in zip(td, r)) + "</tr>"
                        for r in b.rows]
                out.append("</tbody></table></div>")
            if b.notes:
                out.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in b.notes)
                           + "</ul>")
    out.append("</body></html>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------

def build_report(inputs: Inputs, out_dir: Path, manifest: Manifest,
                 title: str = "Document-level NMT: results") -> None:
    """Write index.html, report.md, the two plots and config.json into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    scores = inputs.scores
    roles = job_roles(inputs)
    system_roles = {s: roles.get(job, "model") for s, job in inputs.systems.items()}
    starts = start_updates(inputs.train)
    manifests = {"ingest_corpus": [m for m in inputs.ingest.values() if m],
                 "make_shards": [m for m in inputs.shards.values() if m],
                 "train_model": [r.manifest for r in inputs.train.values() if r.manifest],
                 "decode_test": [m for ms in inputs.decode.values() for m in ms if m]}
    models = list(inputs.systems)

    styles = curve_styles(inputs, roles)
    colours = {s: styles[job][1] for s, job in inputs.systems.items() if job in styles}
    plot_bleu(scores, colours, system_roles, out_dir / BLEU_FILE)
    bleu = Section("BLEU with 95 % intervals",
                   [Figure(BLEU_FILE, "Test BLEU with 95 % bootstrap intervals",
                           ["Point: test-set BLEU; bar: its 95 % bootstrap interval; dashed "
                            "line: the baseline's BLEU. A model and its matched control share "
                            "a colour (the control's point is hollow), as in the training "
                            "curves."])])
    if scores is None:
        bleu.blocks.append(Table("BLEU with 95 % intervals", ["System", "BLEU"],
                                 [[m, NA] for m in models], [f"Scores: {NA} (not read)."]))
        metrics = []
    else:
        bleu.blocks.append(bleu_table(scores))
        metrics = [results_table(scores)]
    missing = plot_curves(inputs.train, starts, styles, out_dir / CURVES_FILE)
    curves = Figure(CURVES_FILE, "Dev loss and dev BLEU against total updates",
                    ["One line per training job; a model, its matched control (dashed) and the "
                     "jobs they start from (dotted) share a colour, the baseline is black; a "
                     "fine-tune starts where its initial checkpoint was saved (table below)."])
    if missing:
        curves.notes.append(f"No dev records ({NA}): {', '.join(missing)}.")
    across = seeds_table(scores) if scores else None
    if across is not None:
        bleu.blocks.append(across)
    sections = [
        Section("Verdict", [regime_text(inputs), verdict_table(inputs),
                            noise_floor_block(inputs), budget_table(inputs, starts)]),
        Section("Run", [run_table(inputs, manifests)]),
        bleu,
        *([Section("All metrics", metrics)] if metrics else []),
        Section("Discourse", discourse_table(models, inputs.consistency, inputs.contrastive,
                                             inputs.suites)),
        Section("Training", [curves, jobs_table(inputs, starts, roles)]),
        Section("Models", [model_table(inputs)]),
        Section("Data funnel", [funnel_table(inputs.ingest, inputs.shards)]),
        Section("Wall time per stage", [stage_table(inputs.benchmarks)]),
    ]
    write_text(out_dir / CONFIG_FILE, json.dumps(inputs.config, indent=2, sort_keys=True) + "\n")
    write_text(out_dir / "report.md", to_markdown(title, sections) + "\n")
    write_text(out_dir / "index.html", to_html(title, sections) + "\n")
    manifest.counts = {"sections": len(sections), "systems": len(models),
                       "training_jobs": len(inputs.train)}


def read_inputs(args: argparse.Namespace, manifest: Manifest) -> Inputs:
    """Read every file the flags name (each recorded in the report's manifest)."""
    def read(path: str | Path, reader: Callable[[Path], Any] = read_json) -> Any:
        manifest.add_input(path)
        return reader(Path(path))

    train = {job: TrainRun(job, Path(man), read(man), read(metrics, read_metrics), parent or None)
             for job, man, metrics, parent in args.train}
    decode: dict[str, list[dict | None]] = defaultdict(list)
    for system, path in args.decode:
        decode[system].append(read(path))
    benchmarks: dict[str, list[dict | None]] = defaultdict(list)
    for rule, path in args.benchmark:
        benchmarks[rule].append(read(path, read_benchmark))
    return Inputs(
        scores=read(args.scores),
        consistency=read(args.consistency) if args.consistency else None,
        contrastive={m: r for m, p in args.contrastive if (r := read(p)) is not None},
        suites=args.suites,
        systems=dict(args.system),
        train=train,
        decode=dict(decode),
        ingest={c: read(p) for c, p in args.ingest},
        shards={c: read(p) for c, p in args.shards},
        benchmarks=dict(benchmarks),
        config=json.loads(args.config_json),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scores", required=True, type=Path, help="score_test's scores.json")
    ap.add_argument("--consistency", type=Path, help="discourse_consistency's consistency.json")
    ap.add_argument("--contrastive", nargs=2, action="append", default=[],
                    metavar=("MODEL", "JSON"), help="contrastive suite results of a model")
    ap.add_argument("--suites", nargs="*", default=[], help="configured contrastive suite names")
    ap.add_argument("--system", nargs=2, action="append", required=True, metavar=("SYSTEM", "JOB"),
                    help="an evaluated system and its training job, baseline first (repeatable)")
    ap.add_argument("--train", nargs=4, action="append", default=[],
                    metavar=("JOB", "MANIFEST", "METRICS", "PARENT"),
                    help="a training job's manifest.json and metrics.jsonl, and the job whose "
                         "best checkpoint it starts from ('' for none; repeatable)")
    ap.add_argument("--decode", nargs=2, action="append", default=[],
                    metavar=("SYSTEM", "MANIFEST"), help="a decode manifest of SYSTEM (repeatable)")
    ap.add_argument("--ingest", nargs=2, action="append", default=[],
                    metavar=("CORPUS", "MANIFEST"), help="a corpus's ingest manifest (repeatable)")
    ap.add_argument("--shards", nargs=2, action="append", default=[],
                    metavar=("CORPUS", "MANIFEST"), help="a corpus's make_shards manifest "
                                                         "(repeatable)")
    ap.add_argument("--benchmark", nargs=2, action="append", default=[],
                    metavar=("RULE", "TSV"), help="a job's Snakemake benchmark file (repeatable)")
    ap.add_argument("--config-json", required=True,
                    help="the validated config as JSON (hashed, written beside the report)")
    ap.add_argument("--title", default="Document-level NMT: results")
    ap.add_argument("--out-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage="report", params={"systems": dict(args.system),
                                                "suites": args.suites})
    try:
        build_report(read_inputs(args, manifest), args.out_dir, manifest, args.title)
    except (OSError, ValueError, KeyError) as e:
        log.error("%s", e)
        return 1
    manifest.write(args.out_dir / "manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
