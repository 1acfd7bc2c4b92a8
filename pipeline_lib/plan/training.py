"""The training part of the plan: every training job (the ``models``, the jobs they start from,
their matched controls, random-context twins and, with several seeds, a replica of each per
seed). What each job's rule is given, and in what order they run: train_inputs.py.

Matched controls are jobs the config never names: :meth:`TrainingJobs._controls` derives each
from its model's chain (same updates, data and schedule without the model's method) and adds it
to ``jobs``, so the DAG trains it like any other. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
import zlib
from dataclasses import dataclass, replace
from typing import Any

from pipeline_lib.context_conditions import CONTEXT_MODELS
from pipeline_lib.layout import CKPT_BEST

PARSE_PRIORITY = 5  # below the baselines, above every other training job: train_inputs.py
SEED_SUFFIX = "_seed"   # <job>_seed<N>: job <job> trained with seed N (config `seeds`)
MATCHED = "_matched_"   # <parent>_plus_matched_<job>: a control trained exactly <job>'s updates
TWIN = "_random_context"  # <model>_random_context: <model> trained with other documents' context


def chain_jobs(models: list[str], settings: Mapping[str, Mapping]) -> list[str]:
    """Every evaluated model and, after them, the jobs they start from (``init_from``,
    followed transitively), each once: the jobs the config names (matched controls are derived
    from these)."""
    order: list[str] = []
    pending = list(models)
    while pending:
        job = pending.pop(0)
        if job not in order:
            order.append(job)
            if (settings.get(job) or {}).get("init_from"):
                pending.append(settings[job]["init_from"])
    return order


def replica_name(job: str, seed: int) -> str:
    return f"{job}{SEED_SUFFIX}{seed}"


@dataclass(frozen=True)
class TrainJob:
    """One training job (``results/train_model/<name>``)."""

    name: str
    model: dict[str, Any]        # ModelConfig fields: size, registry name, extras
    train: dict[str, Any]        # TrainConfig fields: train section, job overrides, init, freeze
    data: str                    # shard task the job trains and validates on: sent | doc
    corpus: str                  # corpus whose train shards it reads
    dev_corpus: str              # corpus whose dev shards validate it
    init_from: str | None        # job whose checkpoint initialises it
    aux: str | None              # second shard task (restore | doc) on a share of the updates
    aux_corpus: str | None = None  # corpus of the aux shards (None = ``corpus``)
    # a control of a job that stops on a plateau: that job (whose manifest gives the updates,
    # so this one runs after it) and the share of its updates to train (translation updates)
    budget_of: str | None = None
    budget_share: float = 1.0

    def config_json(self, pretokenize: dict | None = None) -> str:
        """The trainer's ``--config-json`` (also the rule's params rerun trigger), with
        ``pretokenize`` (``Plan.pretokenize``) where the text was pre-tokenized."""
        extra = {"pretokenize": pretokenize} if pretokenize else {}
        return json.dumps({"model": self.model, "train": self.train, **extra}, sort_keys=True)


class TrainingJobs:
    """Training jobs, controls, twins and seeds (a part of :class:`pipeline_lib.plan.Plan`;
    the checkpoint paths it names come from train_inputs.py)."""

    def _plan_jobs(self) -> None:
        """``jobs``, ``controls``, ``models``, ``seeds`` and ``replicas`` from the config."""
        config = self.config
        self.jobs = self._train_jobs()
        self.controls = self._controls() if config["score"]["matched_controls"] else {}
        #: context model -> its random-context twin (config score.context_twins)
        self.twins = self._twins() if config["score"]["context_twins"] else {}
        #: the evaluated model jobs, baseline first (``models``, or each of them per seed)
        self.models: list[str] = list(config["models"])
        self.seeds: list[int] = list(config["seeds"] or [config["train"]["seed"]])
        #: job -> (the job of the single-seed plan it repeats, its seed), with several seeds
        self.replicas: dict[str, tuple[str, int]] = {}
        if config["seeds"]:
            self._seed(self.seeds)

    def _train_jobs(self) -> dict[str, TrainJob]:
        """Every evaluated model plus the jobs they start from (``init_from``), in order."""
        jobs = chain_jobs(self.config["models"], self.config["model_settings"])
        return {job: self._job(job) for job in jobs}

    def _job(self, job: str) -> TrainJob:
        cfg = self.config
        s = cfg["model_settings"][job]
        train = {k: v for k, v in cfg["train"].items() if k not in ("corpus", "dev_corpus")}
        corpus = s["corpus"] or cfg["train"]["corpus"]
        init, aux = s["init_from"], s["aux"]
        return TrainJob(
            name=job,
            model={**cfg["model_sizes"][s["size"] or cfg["model"]["size"]],
                   "name": s["name"] or job, "extras": dict(s["extras"])},
            train={**train, **(cfg["fine_tune"]["train"] if init else {}), **s["train"],
                   "init_from": self.checkpoint(init, CKPT_BEST) if init else None,
                   "freeze": list(s["freeze"]),
                   **({"aux_ratio": s["aux_ratio"]} if aux else {})},
            data=s["data"],
            corpus=corpus,
            dev_corpus=cfg["train"]["dev_corpus"] or corpus,
            init_from=init,
            aux=aux,
            aux_corpus=(s["aux_corpus"] or corpus) if aux else None,
        )

    # --- matched controls ----------------------------------------------------------------
    def _controls(self) -> dict[str, str]:
        """Evaluated model -> the job that had the same number of translation updates on the
        same sentence pairs without the model's method, added to ``self.jobs`` (Δ and † in the
        report are computed against it as well as against the baseline).

        The control mirrors the model's training chain link by link with Transformer jobs:
        a link that starts from a sentence-level Transformer job (two-step recipes, a DBSA or
        CAMN fine-tune) becomes that job continued for the same updates, on the same data, with
        the same schedule and every parameter trained; a link of a non-Transformer chain (cross-
        task pre-training, then fine-tuning) becomes a Transformer trained on that link's corpus
        for that link's translation updates (restoration updates do not translate), starting
        from the control of the previous link. A control identical to an existing job (e.g. the
        baseline) is that job.

        Under a plateau rule (``train.patience`` > 0, the converged regime) a job's number of
        updates is known only when it has stopped. Its control then runs after it and trains
        exactly that many updates (times the translation share, like a budget) with the stop
        rule off (``budget_of``: the trainer reads the job's manifest, training/train_config.py
        ``matched_budget``), from the same initial checkpoint, on the same data, with the same
        schedule, every parameter trained. WHY not a plateau of its own (issue 34): a frozen
        model that plateaus at 350 updates against a control that trains every parameter to a
        600-update cap compares budgets, not methods. Its name says whose updates it copies
        (``transformer_plus_matched_doct``), so each model has its own; a budget control says
        its updates (``transformer_plus150_doc``)."""
        controls: dict[str, str] = {}
        for model in self.config["models"]:
            control = self._control_job(model)
            if control != model:
                controls[model] = control
        return controls

    def _control_job(self, name: str) -> str:
        """The job mirroring job ``name`` (itself for a sentence-level Transformer)."""
        job = self.jobs[name]
        if job.model["name"] == "transformer" and not job.aux:
            return name
        parent = self._control_job(job.init_from) if job.init_from else None
        share = 1.0 - (job.train.get("aux_ratio") or 0.0) if job.aux == "restore" else 1.0
        steps = round(job.train["max_steps"] * share)
        train = {k: v for k, v in job.train.items() if k != "aux_ratio"}
        # A job that stops on a plateau: its control trains exactly its updates, after it
        # (see _controls); ``steps`` stays the cap the budget cannot exceed.
        matched = job.train.get("patience", 0) > 0
        budget = {"budget_of": name, "budget_share": share} if matched else {}
        if matched:
            train["patience"] = 0
        if parent is None:
            suffix = "" if job.corpus == self.config["train"]["corpus"] else f"_{job.corpus}"
            spec = TrainJob(name=(f"transformer_scratch{MATCHED}{name}" if matched
                                  else f"transformer_scratch{steps}{suffix}"),
                            model={**job.model, "name": "transformer", "extras": {}},
                            train={**train, "max_steps": steps, "init_from": None, "freeze": []},
                            data="sent" if job.data == "doc" and job.aux else job.data,
                            corpus=job.corpus, dev_corpus=job.dev_corpus, init_from=None,
                            aux=None, **budget)
        else:
            spec = TrainJob(name=(f"{parent}_plus{MATCHED}{name}" if matched else
                                  f"{parent}_plus{steps}" + ("" if job.data == "sent"
                                                              else f"_{job.data}")),
                            model=dict(self.jobs[parent].model),
                            train={**train, "max_steps": steps,
                                   "init_from": self.checkpoint(parent, CKPT_BEST), "freeze": []},
                            data=job.data, corpus=job.corpus, dev_corpus=job.dev_corpus,
                            init_from=parent, aux=None, **budget)
        same = [j for j in self.jobs.values() if _same_training(j, spec)]
        if same:
            return same[0].name
        if spec.name in self.jobs:
            spec = TrainJob(**{**spec.__dict__, "name": f"{spec.name}_"
                               f"{zlib.crc32(spec.config_json().encode()) % 10_000:04d}"})
        self.jobs[spec.name] = spec
        return spec.name

    # --- random-context twins --------------------------------------------------------------
    def _twins(self) -> dict[str, str]:
        """Evaluated context-rule model -> its twin, added to ``self.jobs``: the same job (its
        initial checkpoint, frozen parameters, data, seed and schedule) with every sentence's
        context drawn from other documents (``train.context: random``, in the true amount), so
        Δ(model − twin) is what the document's own context adds beyond the capacity and the
        regularisation of the context modules (Li et al. 2020: multi-encoder gains persist with
        random context). A model that stops on a plateau gives its twin exactly its updates
        (``budget_of``, like a matched control: the twin runs after it); otherwise both have the
        same cap. The twin is decoded like its model, with the true context: only what it was
        trained with differs (our choice: Li et al. also test such models with true context)."""
        twins: dict[str, str] = {}
        for model in self.config["models"]:
            job = self.jobs[model]
            if job.model["name"] not in CONTEXT_MODELS:
                continue
            matched = job.train.get("patience", 0) > 0
            twin = replace(job, name=f"{model}{TWIN}",
                           train={**job.train, "context": "random",
                                  **({"patience": 0} if matched else {})},
                           **({"budget_of": model, "budget_share": 1.0} if matched else {}))
            self.jobs[twin.name] = twin
            twins[model] = twin.name
        return twins

    def _seed(self, seeds: list[int]) -> None:
        """Train with ``seeds``: one seed keeps the names (``train.seed`` = it); several repeat
        jobs as ``<job>_seed<N>``, each link starting from the same seed's parent, so a model
        and its control of seed N share their initial checkpoint and pair up in the test across
        seeds. Which jobs repeat is ``seed_scope``: ``fine_tune`` (default) repeats every job
        that starts from a checkpoint and trains a job from scratch (the baseline, cross-task
        pre-training) once, with the first seed, shared by every seed's fine-tunes (issue 34:
        "replicate the fine-tune stage over at least 3 seeds from one baseline"; the baseline is
        the most expensive job of a converged run); ``all`` repeats every job, so the spread
        also holds what the seed does to the baseline."""
        if len(seeds) == 1:
            self.jobs = {n: replace(j, train={**j.train, "seed": seeds[0]})
                         for n, j in self.jobs.items()}
            return
        repeated = {n for n, j in self.jobs.items()
                    if self.config["seed_scope"] == "all" or j.init_from}

        def run(job: str | None, seed: int) -> str | None:
            return replica_name(job, seed) if job in repeated else job

        single, self.jobs = self.jobs, {}
        for name, job in single.items():
            if name not in repeated:
                self.jobs[name] = replace(job, train={**job.train, "seed": seeds[0]})
                continue
            for seed in seeds:
                rep, init = replica_name(name, seed), run(job.init_from, seed)
                self.jobs[rep] = replace(job, name=rep, init_from=init,
                                         budget_of=run(job.budget_of, seed), train={
                    **job.train, "seed": seed,
                    "init_from": self.checkpoint(init, CKPT_BEST) if init else None})
                self.replicas[rep] = (name, seed)
        self.controls = {run(m, s): run(c, s) for m, c in self.controls.items() for s in seeds}
        self.twins = {run(m, s): run(t, s) for m, t in self.twins.items() for s in seeds}
        self.models = list(dict.fromkeys(run(m, s) for m in self.config["models"]
                                         for s in seeds))


def _same_training(a: TrainJob, b: TrainJob) -> bool:
    """Whether two jobs train the same model the same way on the same data (names aside)."""
    return a.__dict__ | {"name": ""} == b.__dict__ | {"name": ""}
