"""The report itself: the sections in their order, built from the inputs and written beside the
plots (``build_report``), and the command line that reads the inputs the flags name (``main``,
run by ``python -m pipeline_lib.evaluate.report``)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pipeline_lib import stage_options
from pipeline_lib.atomic import write_text
from pipeline_lib.evaluate import report
from pipeline_lib.evaluate.report.chains import job_roles, start_updates
from pipeline_lib.evaluate.report.context_use import (context_bleu_table, context_seeds_table,
                                                      context_table)
from pipeline_lib.evaluate.report.document import (BLEU_FILE, CONFIG_FILE, CURVES_FILE, NA,
                                                   Figure, Section, Table)
from pipeline_lib.evaluate.report.inputs import Inputs, read_inputs
from pipeline_lib.evaluate.report.data_gap import data_gap_block
from pipeline_lib.evaluate.report.paper_comparison import paper_table
from pipeline_lib.evaluate.report.plots import curve_styles, plot_bleu, plot_curves
from pipeline_lib.evaluate.report.render import to_html, to_markdown
from pipeline_lib.evaluate.report.results import bleu_table, results_table, seeds_table
from pipeline_lib.evaluate.report.tables import (discourse_table, funnel_table, jobs_table,
                                                 model_table, run_table, stage_table)
from pipeline_lib.evaluate.report.verdict import budget_table, regime_text, verdict_table
from pipeline_lib.manifest import Manifest

log = logging.getLogger("report")


def build_report(inputs: Inputs, out_dir: Path, manifest: Manifest,
                 title: str = "Document-level NMT: results", paper: dict | None = None) -> None:
    """Write index.html, report.md, the two plots and config.json into ``out_dir``; ``paper``:
    a preset's figures (``paper_comparison``)."""
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
        if (compared := paper_table(scores, paper)) is not None:
            metrics.append(compared)
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
    context_blocks = [b for b in ([context_table(inputs.cxmi)] if inputs.cxmi else [])
                      + [context_bleu_table(scores) if scores else None,
                         context_seeds_table(scores, inputs.cxmi) if scores else None]
                      if b is not None]
    sections = [
        Section("Verdict", [regime_text(inputs), verdict_table(inputs),
                            data_gap_block(inputs), budget_table(inputs, starts)]),
        Section("Run", [run_table(inputs, manifests)]),
        bleu,
        *([Section("All metrics", metrics)] if metrics else []),
        *([Section("Context use", context_blocks)] if context_blocks else []),
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


def main(argv: list[str] | None = None) -> int:
    # --help: the package's docstring, what the report shows and why
    ap = argparse.ArgumentParser(description=report.__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
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
    ap.add_argument("--cxmi", nargs=3, action="append", default=[],
                    metavar=("MODEL", "TEST_SET", "JSON"),
                    help="context_cxmi's record of a model on one test set (corpus/split)")
    ap.add_argument("--benchmark", nargs=2, action="append", default=[],
                    metavar=("RULE", "TSV"), help="a job's Snakemake benchmark file (repeatable)")
    ap.add_argument("--config-json", required=True,
                    help="the validated config as JSON (hashed, written beside the report)")
    ap.add_argument("--title", default="Document-level NMT: results")
    ap.add_argument("--paper-bleu", type=stage_options.json_value, default=None, metavar="JSON",
                    help="a preset's paper figures: the `bleu` section of its paper table")
    ap.add_argument("--out-dir", required=True, type=Path)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    manifest = Manifest(stage="report", params={"systems": dict(args.system),
                                                "suites": args.suites})
    try:
        build_report(read_inputs(args, manifest), args.out_dir, manifest, args.title,
                     args.paper_bleu)
    except (OSError, ValueError, KeyError) as e:
        log.error("%s", e)
        return 1
    manifest.write(args.out_dir / "manifest.json")
    return 0
