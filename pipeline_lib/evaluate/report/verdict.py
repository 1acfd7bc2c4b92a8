"""The Verdict section, the page's first: the regime, whether each model beats its matched
control under the stated rule (pipeline_lib/evaluate/decision.py), and every job's training
budget and stop rule, so a reader sees whether a model and its control had the same budget."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pipeline_lib.evaluate.decision import RULE, Evidence, decide
from pipeline_lib.evaluate.report.chains import capped, job_roles, regime, stopped, system_groups
from pipeline_lib.evaluate.report.document import NA, Table, Text, fmt
from pipeline_lib.evaluate.report.inputs import Inputs
from pipeline_lib.evaluate.report.results import verdict_test_set


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
                    for r in runs.values() if (p := r.train_params) and not p.get("matched_to"))
    hit = [j for j, r in runs.items() if capped(r)]
    text = ["Regime: converged. Every model and the jobs it starts from trained until its dev "
            f"metric stopped improving ({'; '.join(f'{rule} ({n} jobs)' for rule, n in rules.items())}; "
            "each job capped by its max_steps); each model's matched control then trained "
            "exactly the model's updates from the same checkpoint on the same data, so a "
            "verdict compares the method with the same budget spent on the baseline."]
    if hit:
        text.append(f"Not converged: {len(hit)} job(s) reached their max_steps cap before a "
                    f"plateau: {', '.join(hit)}.")
    return Text(text)


def _updates(inputs: Inputs, systems: list[str]) -> str:
    """Updates of the systems' jobs (one, or each seed's)."""
    steps = []
    for system in systems:
        run = inputs.train.get(inputs.systems.get(system, system))
        steps.append(((run.manifest if run else None) or {}).get("counts", {}).get("steps"))
    return "/".join(fmt(x) for x in steps)


def _interval(c: dict | None, key: str = "bleu_delta_ci_documents") -> str:
    ci = (c or {}).get(key)
    return NA if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def verdict_table(inputs: Inputs) -> Table:
    """One line per model with a matched control: the verdict under the stated rule
    (:mod:`pipeline_lib.evaluate.decision`), Δ BLEU (with several seeds its mean ± sd), each
    seed's paired-bootstrap interval of Δ resampling documents (with one seed also sentences),
    the p-value the rule reads, in which regime, after how many updates of each."""
    scores = inputs.scores or {}
    t = Table("Verdict", ["Model", "Verdict", "Δ BLEU vs control",
                          "Δ 95 % CI: documents (sentences)", "p", "Matched control",
                          "Updates: model", "Updates: control", "Stopped: model / control"])
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
    seen: set[str] = set()
    # context controls (twins, ablated decodings) have their own table (Context use)
    context_controls = {o for _, o, _ in scores.get("against") or []}
    for system in scores["models"]:
        group = groups.get(system, system)
        if (group in seen or system in context_controls
                or roles.get(inputs.systems.get(system, system)) != "model"):
            continue
        seen.add(group)
        members = [s for s in scores["models"] if groups.get(s, s) == group]
        if system not in controls:
            t.rows.append([group, f"no matched control ({mode})", "", "", "", "",
                           _updates(inputs, members), "", "; ".join(
                               stopped(inputs.train.get(inputs.systems.get(x, x)))
                               for x in members)])
            continue
        ctrl = [controls[s] for s in members]
        per_seed = [res["models"][s].get("control") for s in members]
        if "seeds" in res and group in res["seeds"] and "control" in res["seeds"][group]:
            c = res["seeds"][group]["control"]
            delta = f"{c['mean']:+.2f}" + (f" ± {c['sd']:.2f}" if c["sd"] is not None else "") + \
                f" ({c['seeds']} seeds, {c['wins']} better)"
            evidence = Evidence(c["mean"], c["seeds"], c["significant"],
                                [(x or {}).get("bleu_delta_ci_documents") for x in per_seed])
            p, test, ctrl_name = c["p"], "paired t-test across seeds", c["group"]
            ci = "; ".join(_interval(x) for x in per_seed)
        else:
            c = per_seed[0]
            if c is None:
                continue
            delta = f"{c['bleu_delta']:+.2f}"
            evidence = Evidence(c["bleu_delta"], 1, c["bleu_significant"],
                                [c.get("bleu_delta_ci_documents")])
            p, test, ctrl_name = c["bleu_p"], "paired bootstrap", c["system"]
            ci = f"{_interval(c)} ({_interval(c, 'bleu_delta_ci_sentences')})"
        verdict = f"{decide(evidence)} ({mode})"
        jobs = [inputs.train.get(inputs.systems.get(x, x)) for x in members + ctrl]
        hit = sorted({r.job for r in jobs if capped(r)})
        if mode == "converged" and hit:
            verdict += f"; not converged: {', '.join(hit)} hit max_steps"
        stops = " / ".join("; ".join(stopped(inputs.train.get(inputs.systems.get(x, x)))
                                     for x in side) for side in (members, ctrl))
        t.rows.append([group, verdict, delta, ci, "n/a" if p is None else f"{p:.4f} ({test})",
                       ctrl_name, _updates(inputs, members), _updates(inputs, ctrl), stops])
    t.notes.append(RULE)
    t.notes.append(f"On test set {ts}; significant: p < {level}. With several seeds, p is the "
                   "paired t-test of the per-seed differences (each seed's model against the "
                   "same seed's control) and 'better' counts the seeds where the model scored "
                   "higher (section 'Across seeds'); with one seed, sacreBLEU's paired "
                   "bootstrap of the model against its control. Intervals: score_test's paired "
                   "bootstrap of Δ resampling whole documents (their sentences' errors are "
                   "correlated), one per seed; with one seed the sentence-resampled interval "
                   "follows in parentheses.")
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
    # a model decoded again with ablated context trained nothing of its own: its model's row
    ablated = {o for _, o, kind in (inputs.scores or {}).get("against") or []
               if kind.startswith("ctx_")}
    rows = [*((s, j) for s, j in inputs.systems.items() if s not in ablated),
            # then the jobs no system is (pre-training), as "—"
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
                   "same number of updates: fixed in the smoke regime; in the converged regime "
                   "the model stops on its plateau and its control then trains exactly its "
                   "updates (Stop rule: matched). LR: the peak learning rate, reached after the "
                   "warm-up updates; Max steps: the job's cap (its fixed budget where the stop "
                   "rule is fixed or matched); Stop rule: fixed (train.patience 0), matched, or "
                   "the dev plateau it stops on. System —: a "
                   "training job no system is, that others start from (role initialises).")
    return t


def stop_rule(params: dict) -> str:
    """A job's stop rule from its ``params.train``: ``fixed`` (patience 0: it trains max_steps),
    ``matched: <job>`` (a matched control: the updates of that job) or ``plateau: dev loss,
    patience 10``."""
    if not params:
        return NA
    if params.get("matched_to"):
        return f"matched: {Path(params['matched_to']).parent.name}'s updates"
    if not params.get("patience"):
        return "fixed"
    return f"plateau: dev {params.get('stop_metric', 'loss')}, patience {params['patience']}"
