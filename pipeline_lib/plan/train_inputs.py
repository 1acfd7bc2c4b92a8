"""What each training rule is given, from the training jobs (pipeline_lib.plan.training): its
checkpoints and the checkpoint it starts from, its shard folders and aux stream, the manifest
whose updates a matched control copies, its code hash and its priority when cores are scarce.

WHY apart from the jobs: which jobs exist (controls, twins, seeds) changes with the comparison's
design; what a job's rule reads changes with the results layout and the trainer's flags.
"""

from __future__ import annotations

from pipeline_lib.codehash import code_hash
from pipeline_lib.layout import CKPT_BEST, CKPT_FINAL


class TrainInputs:
    """Each training job's inputs, flags and priority (a part of :class:`pipeline_lib.plan.Plan`,
    over its ``config``, ``results`` and ``jobs``)."""

    def train_priority(self, job: str) -> int:
        """Snakemake priority of a training job when cores are scarce: the longest chain first
        (critical-path list scheduling). The baseline of each seed (10) has the most updates
        and the most jobs wait for it; stanza models and parsing (``PARSE_PRIORITY``, DBSA's
        data) run beside it; a job that other jobs start from (3: cross-task pre-training and
        its control) heads a chain of two trainings, so it goes before the jobs nothing starts
        from (2: every fine-tune). With the fine-tunes first, the default run ended with the
        cross-task fine-tune alone on one core for 5 minutes (bench/RESULTS.md)."""
        baselines = {m for m in self.models  # the baseline of each seed
                     if self.replicas.get(m, (m,))[0] == self.config["models"][0]}
        if job in baselines:
            return 10
        return 3 if any(j.init_from == job for j in self.jobs.values()) else 2

    def train_code(self, job: str) -> str:
        """Code hash of a training job: the trainer, the shared core and the module of the job's
        own model (``pipeline_lib/models/<name>.py``, which the registry imports by name), so
        editing one model retrains its jobs and what starts from them, not the others."""
        return code_hash("training.train", "training.launch",
                         f"models.{self.jobs[job].model['name']}")

    def checkpoint(self, job: str, which: str = CKPT_FINAL) -> str:
        return self.results.checkpoint(job, which)

    def init_inputs(self, job: str) -> list[str]:
        init = self.jobs[job].init_from
        return [self.checkpoint(init, CKPT_BEST)] if init else []

    def aux_shards(self, job: str) -> str | None:
        """The folder of a job's second data stream (cross-task), else None."""
        j = self.jobs[job]
        if not j.aux:
            return None
        split = "mono" if j.aux == "restore" and "mono" in self.splits(j.aux_corpus) else "train"
        return f"{self.results.make_shards(j.aux_corpus)}/{j.aux}/{split}"

    def aux_flag(self, job: str) -> str:
        """``--aux-shards DIR`` of a job with a second data stream (cross-task), else ""."""
        aux = self.aux_shards(job)
        return f"--aux-shards {aux}" if aux else ""

    def train_shards(self, job: str, split: str = "train", dev: bool = False) -> str:
        """The shard folder of ``split`` that job ``job`` trains (or, ``dev``, validates) on."""
        j = self.jobs[job]
        return (f"{self.shard_root(j.dev_corpus if dev else j.corpus, j.data)}/"
                f"{self.shard_task(j.data)}/{split}")

    def budget_inputs(self, job: str) -> list[str]:
        """The manifest of the job whose updates a matched control copies (so it runs after
        that job), else none."""
        of = self.jobs[job].budget_of
        return [self.results.train_model(of).manifest] if of else []

    def budget_flag(self, job: str) -> str:
        """The trainer's ``--budget-of MANIFEST --budget-share S`` of a matched control, else
        ""."""
        j = self.jobs[job]
        if not j.budget_of:
            return ""
        return (f"--budget-of {self.results.train_model(j.budget_of).manifest} "
                f"--budget-share {j.budget_share}")

    def aux_inputs(self, job: str) -> list[str]:
        """The shard folder of a job's aux corpus (declared: another corpus's shards rerun it)."""
        j = self.jobs[job]
        return [self.results.make_shards(j.aux_corpus)] if j.aux else []

    def job_regex(self) -> str:
        """Wildcard constraint matching exactly the training job names (longest first)."""
        return "|".join(sorted(self.jobs, key=len, reverse=True))
