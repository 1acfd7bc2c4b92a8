"""The two figures: test BLEU with its intervals, and the dev curves against total updates, a
model, its control and the jobs they start from sharing a colour. matplotlib is imported only
when a plot is drawn."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pipeline_lib.atomic import atomic_output
from pipeline_lib.evaluate.report.chains import parent_job, system_groups
from pipeline_lib.evaluate.report.document import NA
from pipeline_lib.evaluate.report.inputs import Inputs, TrainRun


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
