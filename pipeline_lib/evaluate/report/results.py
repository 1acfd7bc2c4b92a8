"""The tables of the test scores (``score_test``'s scores.json): BLEU with its 95 % intervals,
the statistics across seeds, all metrics; and which baseline a system is tested against and
which test set a verdict is read on, which the verdict and the data-subset gap read too."""

from __future__ import annotations

from pipeline_lib.evaluate.report.document import NA, Table, fmt
from pipeline_lib.evaluate.score import SIG_MARK


def baseline_of(scores: dict, system: str) -> str:
    """The baseline ``system`` is tested against: the run's, or with several seeds the same
    seed's run of it (score.seed_groups) unless every seed shares one."""
    reps = scores.get("replicates") or {}
    if system not in reps or scores["baseline"] not in reps:
        return scores["baseline"]
    group, seed = reps[scores["baseline"]][0], reps[system][1]
    return next(s for s, (g, n) in reps.items() if g == group and n == seed)


def verdict_test_set(scores: dict) -> str:
    """The test set a verdict is read on: ``All`` when there are several, else the only one."""
    return scores["test_sets"][-1]


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
                   "pairs without the model's method (pipeline_lib/plan/training.py); a gain "
                   "counts only where it holds against the control.")
    t.notes.append("Plain text of what was scored, one segment a line in the references' order: "
                   "score_test/text/<corpus>/<split>/ref.txt and <system>.txt beside this "
                   "report's folder; `sacrebleu ref.txt -i <system>.txt -m bleu -b -w 2` there "
                   "prints the BLEU above.")
    return t


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
    reps = scores["replicates"]
    if scores["baseline"] in reps:
        t.notes.append("Every job, the baseline included, was trained once per seed.")
    else:
        n = len({seed for _, seed in reps.values()})
        t.notes.append(f"The fine-tune stage was replicated over {n} seeds from one baseline, "
                       f"{scores['baseline']}, trained once (seed_scope: fine_tune): the spread "
                       "is what the seed does to the fine-tunes and controls, not to the "
                       "baseline.")
    t.notes.append("sd: sample standard deviation over seeds. Each seed's model is compared "
                   "with the same seed's control and baseline (they share its initial "
                   "checkpoint and data order); p per seed: sacreBLEU's paired bootstrap; "
                   "p (t-test): Student's paired t-test of the per-seed differences, df = seeds "
                   f"- 1; {SIG_MARK}: p < {scores['config']['significance_level']}.")
    return t


def results_table(scores: dict) -> Table:
    """Models x test sets with BLEU / METEOR / d-BLEU / chrF / TER (and a preset's tokenized
    BLEU), delta to the baseline and daggers (none for METEOR and tokenized BLEU, which
    score_test does not resample)."""
    base = scores["baseline"]
    sets = scores["test_sets"]
    tokenized = scores["config"].get("tokenized_bleu")
    metrics = [("bleu", "BLEU"), *([("tokenized_bleu", "tok. BLEU")] if tokenized else []),
               ("meteor", "METEOR"), ("dbleu", "d-BLEU"), ("chrf", "chrF"), ("ter", "TER")]
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
    if tokenized:
        t.notes.append(f"tok. BLEU: BLEU as the paper computed it ({tokenized['as']}): "
                       "multi-bleu.perl on Moses tokens of the hypotheses and references"
                       f"{', lowercased' if tokenized['lowercase'] else ''}; not resampled, "
                       f"so no {SIG_MARK}. The number to put beside the paper's; BLEU is "
                       "sacreBLEU's on detokenized text.")
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
