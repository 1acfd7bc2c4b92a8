"""Training chains: where each job starts on the total-updates axis (a fine-tune counts on from
the checkpoint it starts from), and who each job is (baseline, control, model, or a job others
only start from), which seed group a system belongs to, the regime and why a job stopped. Read
by the verdict, the tables and the plots alike."""

from __future__ import annotations

from pipeline_lib.evaluate.report.document import NA, fmt
from pipeline_lib.evaluate.report.inputs import Inputs, TrainRun


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
    scores = inputs.scores or {}
    controls = {inputs.systems.get(c, c) for c in (scores.get("controls") or {}).values()}
    # a random-context twin is a control of its model (an ablated decoding shares its job)
    controls |= {inputs.systems.get(o, o) for _, o, kind in scores.get("against") or []
                 if kind == "twin"}
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
    """``converged`` when every training job ran under a plateau rule (``train.patience`` > 0)
    or is a matched control of one (it trained that job's updates: ``matched_to``), else
    ``smoke`` (at least one job trained a fixed number of updates)."""
    known = [r.train_params for r in runs.values() if r.manifest is not None]
    return "converged" if known and all((p.get("patience") or 0) > 0 or p.get("matched_to")
                                        for p in known) else "smoke"


def capped(run: TrainRun | None) -> bool:
    """Whether a job stopped at a cap (max_steps, or max_seconds of a time-boxed run) before a
    plateau: not a matched control at its max_steps, the budget it copies."""
    if run is None:
        return False
    reason = run.stop.get("reason")
    return reason == "max_seconds" or (reason == "max_steps"
                                       and not run.train_params.get("matched_to"))


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
