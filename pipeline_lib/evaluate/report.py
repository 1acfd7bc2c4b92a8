"""``python -m pipeline_lib.evaluate.report``: the final report, ``index.html`` and ``report.md``.

Everything shown is read from stage outputs, never typed in: scores and significance
(``score_test``), lexical consistency and contrastive suites (``discourse_*``), data statistics
(ingest manifests, shard indexes), parameter counts and speeds (train and decode manifests) and the
training curves (``metrics.jsonl``). Inputs that a stage did not produce, or fields it did not
write, show as "n/a" rather than failing, so that a partial run still gives a readable report.
The same table objects render to Markdown and HTML, so the two files cannot disagree.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipeline_lib.constants import SENT_SUFFIX, SIG_MARK, Split
from pipeline_lib.manifest import Manifest

log = logging.getLogger("report")

NA = "n/a"
CURVES_FILE = "training_curves.png"


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------
# defensive readers
# ------------------------------------------------------------------------------------------------

def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        log.warning("%s: not read (%s)", path, e)
        return None


def find_key(obj: Any, *names: str) -> Any:
    """First value under any of ``names`` anywhere in a nested dict (manifests differ in depth)."""
    if isinstance(obj, dict):
        for n in names:
            if n in obj and obj[n] is not None:
                return obj[n]
        for v in obj.values():
            found = find_key(v, *names)
            if found is not None:
                return found
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


# ------------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------------

def results_table(scores: dict) -> Table:
    """Models x test sets with BLEU / d-BLEU / chrF / TER, delta to the baseline and daggers."""
    base = scores["baseline"]
    sets = scores["test_sets"]
    metrics = [("bleu", "BLEU"), ("dbleu", "d-BLEU"), ("chrf", "chrF"), ("ter", "TER")]
    controls = scores.get("controls", {})
    header = ["Model", "Matched control"] + [f"{ts} {label}" for ts in sets for _, label in metrics]
    if controls:
        header += [f"{ts} {label} vs control" for ts in sets for label in ("BLEU", "d-BLEU")]
    t = Table("Results", header)
    control_rows = set(controls.values())
    for model in scores["models"]:
        name = (f"{model} (baseline)" if model == base else
                f"{model} (control)" if model in control_rows else model)
        row = [name, controls.get(model, "")]
        for ts in sets:
            r = scores["results"][ts]["models"].get(model, {})
            b = scores["results"][ts]["models"].get(base, {})
            for key, _ in metrics:
                if key not in r:
                    row.append(NA)
                    continue
                cell = f"{r[key]:.2f}"
                if model != base:
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
    t.notes.append(f"Δ in parentheses: difference to the baseline {base}; {SIG_MARK}: "
                   f"p < {level} in sacreBLEU's paired bootstrap resampling "
                   f"({scores['config']['bootstrap_samples']} samples) against the baseline. "
                   "TER: lower is better. d-BLEU: BLEU over documents (sentences joined).")
    if controls:
        t.notes.append("Matched control: the job with the same number of (translation) updates "
                       "on the same sentence pairs without the model's method (pipeline_lib/"
                       "plan.py); 'vs control' columns give the difference to it, "
                       f"{SIG_MARK} where the paired bootstrap against the control has p < "
                       f"{level}. A gain counts only where it holds against the control.")
    for ts in sets:
        n = scores["results"][ts]
        t.notes.append(f"{ts}: {n['sentences']:,} sentences, {n['documents']:,} documents, "
                       f"{n['references']} reference(s).")
    first = scores["results"][sets[0]]["models"][base]
    for key, label in metrics:
        t.notes.append(f"{label} signature: {first[f'{key}_signature']}")
    for model in scores["models"]:
        if model == base:
            continue
        p = {ts: scores["results"][ts]["models"].get(model, {}).get("bleu_p") for ts in sets}
        t.notes.append(f"{model} vs {base}, BLEU p-values: "
                       + ", ".join(f"{ts} {fmt(v, 4)}" for ts, v in p.items()))
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
        t.notes.append("Lexical consistency: not computed (no consistency output).")
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


def data_table(results_dir: Path, corpora: list[str]) -> Table:
    """Documents, sentences and subword tokens per corpus and split (the seeds' Table 1)."""
    t = Table("Data", ["Corpus", "Split", "Documents", "Sentences", "Source tokens",
                       "Target tokens"])
    for corpus in corpora:
        man = read_json(results_dir / "ingest_corpus" / corpus / "manifest.json") or {}
        counts = man.get("counts", {})
        order = {s.value: i for i, s in enumerate(Split)}
        splits = sorted(set(counts.get("sentences", {})) | set(counts.get("documents", {})),
                        key=lambda s: (order.get(s, len(order)), s))
        for split in splits:
            toks = [None, None]
            index = results_dir / "make_shards" / corpus / "sent" / split / "index.parquet"
            if index.exists():
                tab = pq.read_table(index).to_pydict()
                toks = [int(sum(tab[c])) if c in tab else None
                        for c in ("src_tokens", "tgt_tokens")]
            t.rows.append([corpus, split, fmt(counts.get("documents", {}).get(split)),
                           fmt(counts.get("sentences", {}).get(split)), fmt(toks[0]),
                           fmt(toks[1])])
    t.notes.append("Tokens: sentencepiece subwords from the shard indexes (n/a before sharding).")
    return t


def training_run(results_dir: Path, system: str) -> Path:
    """The training folder of an evaluated system: its own, or for ``<model>_sent`` (a model
    decoded sentence by sentence, decode.smk) the model's."""
    run = results_dir / "train_model" / system
    if not run.exists() and system.endswith(SENT_SUFFIX):
        run = results_dir / "train_model" / system.removesuffix(SENT_SUFFIX)
    return run


def model_table(results_dir: Path, models: list[str], corpora: list[str]) -> Table:
    """Parameters (and their overhead over the baseline, as the papers report it), training
    speed and decoding speed per model. Counts are the trainer's manifest ``counts``."""
    t = Table("Models", ["Model", "Parameters", "vs baseline", "Trainable", "Training tokens/s",
                         "Decoding sentences/s", "Decoding tokens/s"])
    base_params = None
    for k, model in enumerate(models):
        run = training_run(results_dir, model)
        man = read_json(run / "manifest.json") if (run / "manifest.json").exists() else None
        counts = (man or {}).get("counts", {})
        params, trainable = counts.get("parameters"), counts.get("trainable_parameters")
        if k == 0:
            base_params = params
        overhead = (f"{100 * (params - base_params) / base_params:+.1f}%"
                    if params and base_params else "n/a")
        speed = find_key(man, "tokens_per_s")
        if speed is None:
            train = [r["tokens_per_s"] for r in read_metrics(run / "metrics.jsonl")
                     if r.get("split") == "train" and r.get("tokens_per_s") is not None]
            speed = sum(train) / len(train) if train else None
        dec_s, dec_t = [], []
        for corpus in corpora:
            # decode.py writes <split>.manifest.json beside <split>.parquet
            folder = results_dir / "decode_test" / model / corpus
            dm = next((f for f in (folder / "test.manifest.json", folder / "manifest.json")
                       if f.exists()), None)
            d = read_json(dm) if dm else None
            dec_s.append(find_key(d, "sentences_per_s"))
            dec_t.append(find_key(d, "tokens_per_s"))
        t.rows.append([model, fmt(params), overhead if k else "", fmt(trainable), fmt(speed, 0),
                       fmt(_mean(dec_s), 1), fmt(_mean(dec_t), 0)])
    t.notes.append("Speeds as measured by the train and decode stages on their hardware "
                   "(decoding: mean over test corpora). Trainable: parameters updated by this "
                   "job (two-step recipes freeze the baseline's).")
    return t


def _mean(xs: list[float | None]) -> float | None:
    known = [x for x in xs if x is not None]
    return sum(known) / len(known) if known else None


def plot_curves(results_dir: Path, models: list[str], out: Path) -> list[str]:
    """Dev loss and dev BLEU against step, one line per model; returns models without curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(10, 4))
    missing = []
    plotted: set[Path] = set()
    for model in models:
        run = training_run(results_dir, model)
        if run in plotted:   # <model>_sent: the same training curve as <model>
            continue
        plotted.add(run)
        dev = [r for r in read_metrics(run / "metrics.jsonl")
               if r.get("split") == "dev" and "step" in r]
        if not dev:
            missing.append(model)
            continue
        loss = [(r["step"], r["loss"]) for r in dev if r.get("loss") is not None]
        bleu = [(r["step"], r["bleu"]) for r in dev if r.get("bleu") is not None]
        if loss:
            ax_loss.plot(*zip(*loss), marker=".", label=model)
        if bleu:
            ax_bleu.plot(*zip(*bleu), marker=".", label=model)
    for ax, label in ((ax_loss, "dev loss"), (ax_bleu, "dev BLEU")):
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return missing


# ------------------------------------------------------------------------------------------------
# rendering
# ------------------------------------------------------------------------------------------------

def to_markdown(title: str, tables: list[Table], images: list[tuple[str, str]]) -> str:
    out = [f"# {title}", ""]
    for t in tables:
        out += [f"## {t.title}", "", "| " + " | ".join(t.header) + " |",
                "|" + "---|" * len(t.header)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in t.rows]
        out += [""] + [f"- {n}" for n in t.notes] + [""]
    for src, alt in images:
        out += [f"## {alt}", "", f"![{alt}]({src})", ""]
    return "\n".join(out)


_CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #999;padding:4px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}th{background:#eee}
.notes{font-size:90%;color:#333}img{max-width:100%}"""


def to_html(title: str, tables: list[Table], images: list[tuple[str, str]]) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>"]
    for t in tables:
        slug = "".join(ch if ch.isalnum() else "-" for ch in t.title.lower())
        out.append(f'<h2 id="{slug}">{e(t.title)}</h2><table><thead><tr>'
                   + "".join(f"<th>{e(h)}</th>" for h in t.header) + "</tr></thead><tbody>")
        out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in t.rows]
        out.append("</tbody></table>")
        if t.notes:
            out.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in t.notes)
                       + "</ul>")
    for src, alt in images:
        out.append(f'<h2>{e(alt)}</h2><img src="{e(src)}" alt="{e(alt)}">')
    out.append("</body></html>")
    return "\n".join(out)


def build_report(scores_path: Path, consistency_path: Path | None, contrastive: dict[str, Path],
                 suites: list[str], results_dir: Path, models: list[str], corpora: list[str],
                 out_dir: Path, manifest: Manifest, title: str = "Document-level NMT: results") -> dict:
    scores = read_json(scores_path)
    if scores is None:
        raise ValueError(f"{scores_path}: the scores cannot be read")
    manifest.add_input(scores_path)
    consistency = read_json(consistency_path) if consistency_path else None
    contrastive_results = {m: r for m, p in contrastive.items() if (r := read_json(p)) is not None}
    tables = [results_table(scores),
              *discourse_table(models, consistency, contrastive_results, suites),
              data_table(results_dir, corpora), model_table(results_dir, models, corpora)]
    missing = plot_curves(results_dir, models, out_dir / CURVES_FILE)
    tables[-1].notes.append("Training curves: " + ("all models" if not missing else
                                                    f"no dev metrics for {', '.join(missing)}"))
    images = [(CURVES_FILE, "Training curves (dev loss and BLEU against step)")]
    (out_dir / "report.md").write_text(to_markdown(title, tables, images) + "\n")
    (out_dir / "index.html").write_text(to_html(title, tables, images) + "\n")
    manifest.counts = {"tables": len(tables), "models": len(models)}
    return {"tables": [t.title for t in tables]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scores", required=True, type=Path)
    ap.add_argument("--consistency", type=Path)
    ap.add_argument("--contrastive", nargs=2, action="append", default=[],
                    metavar=("MODEL", "JSON"), help="contrastive suite results of a model")
    ap.add_argument("--suites", nargs="*", default=[], help="configured contrastive suite names")
    ap.add_argument("--models", nargs="+", required=True, help="models, baseline first")
    ap.add_argument("--corpora", nargs="+", required=True)
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    ap.add_argument("--title", default="Document-level NMT: results")
    ap.add_argument("--out-dir", required=True, type=Path)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage="report", params={"models": args.models, "suites": args.suites})
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        build_report(args.scores, args.consistency, {m: Path(p) for m, p in args.contrastive},
                     args.suites, args.results_dir, args.models, args.corpora, args.out_dir,
                     manifest, args.title)
    except (OSError, ValueError, KeyError) as e:
        log.error("%s", e)
        return 1
    manifest.write(args.out_dir / "manifest.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
