"""What the submit host can tell before any SLURM job is submitted (the Snakefile's ``onstart``
under the SLURM executor): settings that would make every training job fail at its start, or
hang, stop the run once, with the reason.

WHY here and not in the jobs: a training job refused at its start is submitted 1 + retries
times and shows only "FAILED" on the console, each time after a wait in the queue. What decides
it (train_model's partition and its pre-emption mode, ``--no-requeue``, a node count the
launcher will not accept) is known on the submit host from the profile, the command line and
``scontrol``, so the run is refused there (issue 27 item 7, issue 33 item 4).

Partition: resolved as Snakemake and SLURM will resolve it: train_model's own
``set-resources`` entry, else ``default-resources`` (what a command-line ``--set-resources``
that replaces the profile's block leaves), else the cluster's default partition
(``scontrol show partition``'s ``Default=YES``), which is where sbatch sends a job without
``-p``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

from pipeline_lib.training.launch import preemption_problem, scontrol_record
from pipeline_lib.training.slurm_extra import resource_text, sbatch_values

ACCEPT_WAIT = ("accept it with `require_requeue: 0` for train_model in profiles/slurm (a "
               "pre-empted job then waits for `scontrol requeue <jobid>`)")


def default_partition() -> str | None:
    """The cluster's default partition (``Default=YES`` in ``scontrol -o show partition``), or
    None where scontrol is missing, fails or names none."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "partition"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        record = dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", line))
        if record.get("Default") == "YES":
            return record.get("PartitionName")
    return None


def train_partition(overrides: Mapping[str, Mapping],
                    default_resources: Mapping | None) -> tuple[str | None, str]:
    """(train_model's partition, where it comes from), as the executor will submit it."""
    own = resource_text((overrides.get("train_model") or {}).get("slurm_partition"))
    if own:
        return own, "train_model's slurm_partition"
    default = resource_text((default_resources or {}).get("slurm_partition"))
    if default:
        return default, "default-resources' slurm_partition"
    return default_partition(), "the cluster's default partition"


def partition_problem(partition: str | None) -> str | None:
    """Why a pre-emption would end any job on ``partition`` for good (its PreemptMode, read
    with scontrol on the submit host), or None: none named, no record, or it requeues."""
    record = scontrol_record("partition", partition) if partition else {}
    return preemption_problem({}, record) if record else None


def nodes_problem(overrides: Mapping[str, Mapping], cluster_nodes: int) -> str | None:
    """Why the launcher would refuse every training job for its node count, or None: a
    set-resources ``nodes`` for train_model replaces the rule's (config ``cluster.nodes``), so
    sbatch would allocate that many while the trainer spans ``cluster.nodes``."""
    given = resource_text((overrides.get("train_model") or {}).get("nodes"))
    if given is None or given == str(cluster_nodes):
        return None
    return (f"train_model: set-resources nodes={given} but config cluster.nodes={cluster_nodes}: "
            f"sbatch would allocate {given} node(s) and the launcher span {cluster_nodes}, so "
            "every training job would stop at its start. Set the node count in config "
            "`cluster.nodes` alone (the rule passes it to sbatch) and drop `nodes` from "
            "train_model in the profile")


def submit_problem(overrides: Mapping[str, Mapping], no_requeue: bool = False,
                   default_resources: Mapping | None = None,
                   cluster_nodes: int | None = None) -> str | None:
    """Why every training job would be refused at its start, or None: a node count other than
    ``cluster_nodes`` (:func:`nodes_problem`); Requeue=0 (``--no-requeue`` in its slurm_extra,
    or the executor's ``no_requeue``, profile ``slurm-no-requeue``) or a partition that
    pre-empts by CANCEL (:func:`train_partition`), both only while ``require_requeue`` is not
    0 (the site accepted the wait)."""
    train = overrides.get("train_model") or {}
    if cluster_nodes is not None and (problem := nodes_problem(overrides, cluster_nodes)):
        return problem
    if resource_text(train.get("require_requeue")) == "0":
        return None
    extra = sbatch_values(resource_text(train.get("slurm_extra")) or "")
    if no_requeue or "--no-requeue" in extra:
        where = ("slurm-no-requeue in the profile" if no_requeue
                 else "--no-requeue in train_model's slurm_extra")
        return (f"train_model would be submitted with Requeue=0 ({where}): a pre-emption would "
                "end it PREEMPTED, which snakemake-executor-plugin-slurm polls for ever, and its "
                "launcher refuses such a job at its start, so no training job was submitted. "
                f"Drop the setting, or {ACCEPT_WAIT}")
    partition, where = train_partition(overrides, default_resources)
    problem = partition_problem(partition)
    if problem is None:
        return None
    return (f"train_model: {problem} (its partition: {where}), and "
            "snakemake-executor-plugin-slurm polls a PREEMPTED job for ever, so no training job "
            "was submitted. Train on a partition or QOS that requeues (PreemptMode=REQUEUE) or "
            "is not pre-empted (profiles/slurm: train_model's slurm_partition), or "
            f"{ACCEPT_WAIT}")


def partition_warnings(default_resources: Mapping | None,
                       overrides: Mapping[str, Mapping]) -> list[str]:
    """A warning for each partition the run's other jobs go to (``default_resources``' and each
    rule's ``slurm_partition`` but train_model's, which :func:`submit_problem` refuses) that
    pre-empts by CANCEL, read with scontrol on the submit host.

    WHY a warning and not a refusal: such a job (parsing, decoding) ends PREEMPTED, which
    snakemake-executor-plugin-slurm (2.8.0) keeps polling as if it ran, so the run waits for
    ever; but it has no checkpoint to lose, and many sites pre-empt rarely. The user learns it
    before the first job, with what to do."""
    named = {resource_text((default_resources or {}).get("slurm_partition")): "default-resources"}
    for rule, resources in overrides.items():
        if rule != "train_model":
            named.setdefault(resource_text((resources or {}).get("slurm_partition")), rule)
    warnings = []
    for partition, where in named.items():
        if problem := partition_problem(partition):
            warnings.append(f"{problem} ({where}'s slurm_partition): a pre-empted job there is "
                            "never requeued, and snakemake-executor-plugin-slurm polls a "
                            "PREEMPTED job for ever; if `squeue`/`sacct` shows one, stop "
                            "Snakemake and start it again (the job is rerun), or use a "
                            "partition that requeues (PreemptMode=REQUEUE)")
    return warnings
