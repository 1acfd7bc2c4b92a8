"""Start the trainer with one process per granted GPU: plain python, torchrun, or srun + torchrun.

WHY a library function: the same training rule runs on a laptop (no GPU), one GPU, one node with
several GPUs, or several SLURM nodes. The rule stays one line
(``python -m pipeline_lib.training.launch --nodes 1 --gpus-per-node 4 --cpus 32 -- --config ...``)
and this module decides, from the SLURM environment of the job (what the scheduler actually
granted) and the config (what was asked for), which command runs the trainer and how many CPU
threads each of its processes gets. The decision is a pure function of its inputs, so it is
unit-tested without a cluster.

Nodes: the count comes from the config (``--nodes``, config ``cluster.nodes``), never from the job
step's environment: the plugin's jobstep strips the job's SLURM variables before its ``srun``, and
real ``srun -n1 --nodes=2`` shrinks its step to one node, so the step can look like a one-node job
in a two-node allocation. The allocation (the controller's ``NodeList`` of the job, else
``SLURM_JOB_NODELIST``) must hold that many nodes; a mismatch stops the job before it trains on
part of what it asked for.

Requeue: a pre-empted job that SLURM does not requeue ends PREEMPTED, and
snakemake-executor-plugin-slurm (2.8.0) leaves such a job to SLURM and polls it for ever. So under
SLURM the launcher reads the job (``scontrol show job``: ``Requeue``, ``Restarts``, ``Partition``,
``NodeList``) and its partition (``PreemptMode``) first, and with ``--require-requeue 1`` (rule
train_model's resource ``require_requeue``) refuses to start a job that a pre-emption would end.

Several nodes: the rule's shell runs inside the job step that snakemake-executor-plugin-slurm
starts (``srun -n1 ... snakemake``, one task on the first node holding all its CPUs), so a second
``srun`` for the trainer's tasks would wait for those CPUs forever. It asks for ``--overlap``
(share the step's resources; the step only waits for the trainer) and for one task per node, each
a torchrun that starts one process per GPU of its node.

Pre-emption: the rule ``exec``s this module and this module ``exec``s the built command, so the
SIGTERM that SLURM sends to every process of the job step (``--signal=TERM@120``, rule
train_model's ``slurm_extra``: :mod:`pipeline_lib.training.slurm_extra`, and on pre-emption)
reaches torchrun/python, not a shell that would die at once and end the step before the trainer
has saved. The trainer saves ``checkpoints/last`` and exits 143; torchrun waits
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds for its workers to save before it kills them
(``SAVE_GRACE_S``, not torch's 30).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline_lib import stage_options
from pipeline_lib.training.slurm_extra import SAVE_GRACE_S

DEFAULT_MODULE = "pipeline_lib.training.train"
RDZV_PORT = 29500
# SLURM variables that name the job; every other SLURM_* in a job step describes that step
# (its tasks, CPUs, GPUs) and must not shape the trainer's own step (the plugin's jobstep
# executor keeps the same set for its srun, less the restart count, which we put back).
JOB_IDENTITY = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
                "SLURM_RESTART_COUNT"}
# The thread counts Snakemake's shell sets to a rule's threads (the whole node's CPUs); each
# trainer process gets its share in all of them, or the libraries that read the others (MKL,
# OpenBLAS...) run one node-wide thread pool per process.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# Partition PreemptMode values under which a pre-empted job comes back: it is requeued (if the
# job allows it: sbatch --requeue, profiles/slurm's slurm-requeue), or suspended and resumed.
PREEMPT_RESUMES = {"OFF", "REQUEUE", "SUSPEND", "GANG"}


@dataclass(frozen=True)
class LaunchPlan:
    """How many machines, processes per machine and CPUs per machine the trainer gets, and the
    hosts of the allocation (none outside SLURM)."""

    nodes: int
    procs_per_node: int
    gpus_per_node: int
    cpus_per_node: int
    hosts: tuple[str, ...] = ()

    @property
    def threads_per_proc(self) -> int:
        """OMP/MKL threads of each trainer process: its node's CPUs shared by the node's
        processes (each process with all of them would oversubscribe the node N times)."""
        return max(1, self.cpus_per_node // self.procs_per_node)


def _count_devices(value: str) -> int:
    """Count a GPU list as SLURM/CUDA write it: ``0,1,2``, ``4``, or ``gpu:a100:4``."""
    value = value.strip()
    if not value:
        return 0
    if "," in value:
        return len([v for v in value.split(",") if v.strip()])
    tail = value.split("(")[0].split(":")[-1]
    return int(tail) if tail.isdigit() else 0


def granted_gpus(env: Mapping[str, str], requested: int) -> int:
    """GPUs this node may use: what SLURM/CUDA granted wins over what config requested.

    ``CUDA_VISIBLE_DEVICES`` is what the processes will see; ``SLURM_GPUS_ON_NODE`` /
    ``SLURM_GPUS_PER_NODE`` are set by sbatch ``--gpus``/``--gres``. Without either (a workstation),
    the config value is trusted.
    """
    for key in ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        if key in env and env[key].strip() not in ("", "NoDevFiles"):
            return _count_devices(env[key])
    return requested


def granted_cpus(env: Mapping[str, str], requested: int) -> int:
    """CPUs of this node's task: ``SLURM_CPUS_PER_TASK`` (sbatch/srun ``--cpus-per-task``, from
    the rule's threads) wins over the ``--cpus`` the rule passed; at least 1."""
    value = env.get("SLURM_CPUS_PER_TASK", "").strip()
    return max(1, int(value) if value.isdigit() else requested)


class AllocationMismatch(RuntimeError):
    """The SLURM allocation does not hold the nodes the config asks for."""


def launch_plan(env: Mapping[str, str], nodes: int = 1, gpus_per_node: int = 0, cpus: int = 1,
         nodelist: str | None = None) -> LaunchPlan:
    """Combine the job's environment with the requested shape (config ``cluster``, threads).

    ``nodes`` is the config's; inside a SLURM job the allocation (``nodelist``, the controller's
    record of the job; else ``SLURM_JOB_NODELIST``) must hold exactly that many nodes (a one-node
    trainer may run in a larger allocation: :func:`main` says so)."""
    job = env.get("SLURM_JOB_ID")
    nodelist = nodelist or env.get("SLURM_JOB_NODELIST", "")
    hosts = tuple(expand_hostlist(nodelist)) if job else ()
    if job and nodes > 1 and not hosts:
        raise AllocationMismatch(f"{nodes} nodes requested, but neither scontrol nor "
                                 f"SLURM_JOB_NODELIST shows the nodes of SLURM job {job}")
    if hosts and (len(hosts) < nodes or (nodes > 1 and len(hosts) != nodes)):
        raise AllocationMismatch(
            f"config cluster.nodes = {nodes}, but SLURM job {job} holds {len(hosts)} node(s) "
            f"({','.join(hosts)}): the job was not submitted with sbatch --nodes={nodes} (is "
            "`nodes` set for train_model in the profile or on the command line? config cluster "
            "alone shapes the job), or the cluster granted fewer nodes")
    gpus = granted_gpus(env, gpus_per_node)
    return LaunchPlan(nodes=nodes, procs_per_node=max(1, gpus), gpus_per_node=gpus,
                      cpus_per_node=granted_cpus(env, cpus), hosts=hosts)


def expand_hostlist(nodelist: str) -> list[str]:
    """The hosts of a SLURM node list, in order (``gpu[003-004,010],cpu1`` -> gpu003, gpu004,
    gpu010, cpu1; ``r[1-2]-n[1-2]`` -> r1-n1, r1-n2, r2-n1, r2-n2), zero padding kept.

    WHY not ``scontrol show hostnames``: a pure function is checked against SLURM's syntax in
    unit tests, and the node count must not depend on a controller answering from the node."""
    hosts: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist.strip()):
        names = [""]
        for part in re.split(r"(\[[^\]]*\])", item):
            choices = [part]
            if part.startswith("["):
                choices = []
                for rng in part[1:-1].split(","):
                    lo, _, hi = rng.strip().partition("-")
                    if not lo.isdigit() or not (hi or lo).isdigit():
                        raise ValueError(f"cannot parse SLURM node list {nodelist!r}")
                    choices += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi or lo) + 1)]
            names = [n + c for n in names for c in choices]
        hosts += names
    return hosts


def build_command(
    train_args: Sequence[str],
    env: Mapping[str, str],
    p: LaunchPlan,
    module: str = DEFAULT_MODULE,
    python: str = sys.executable,
) -> list[str]:
    """The argv that starts ``python -m <module> <train_args>`` with the launch plan ``p``."""
    target = ["-m", module, *train_args]
    if p.nodes == 1 and p.procs_per_node == 1:
        return [python, *target]
    # `python -m torch.distributed.run` is torchrun, without relying on PATH inside the job.
    torchrun = [python, "-m", "torch.distributed.run"]
    if p.nodes == 1:
        return [*torchrun, "--standalone", "--nnodes=1", f"--nproc_per_node={p.procs_per_node}",
                *target]
    if "SLURM_JOB_ID" not in env:
        raise RuntimeError(
            f"{p.nodes} nodes requested but this is not a SLURM job (no SLURM_JOB_ID); "
            "multi-node training is started through sbatch/srun (profiles/slurm)")
    host = env.get("MASTER_ADDR") or p.hosts[0]
    port = env.get("MASTER_PORT", str(RDZV_PORT))
    # --overlap: see the module docstring; one task per node with all the node's CPUs.
    return [
        "srun", "--overlap", f"--nodes={p.nodes}", f"--ntasks={p.nodes}", "--ntasks-per-node=1",
        f"--cpus-per-task={p.cpus_per_node}", "--kill-on-bad-exit=1",
        *torchrun, f"--nnodes={p.nodes}", f"--nproc_per_node={p.procs_per_node}",
        f"--rdzv_id={env['SLURM_JOB_ID']}", "--rdzv_backend=c10d",
        f"--rdzv_endpoint={host}:{port}", *target,
    ]


def child_env(env: Mapping[str, str], cmd: Sequence[str], p: LaunchPlan) -> dict[str, str]:
    """The environment ``cmd`` runs in: the :data:`THREAD_VARS` per trainer process, torchrun's
    save grace, and for a nested ``srun`` only the SLURM variables that name the job."""
    out = dict(env)
    if cmd[0] == "srun":
        out = {k: v for k, v in out.items()
               if not (k.startswith(("SRUN_", "SBATCH_"))
                       or (k.startswith("SLURM_") and k not in JOB_IDENTITY))}
    for var in THREAD_VARS:
        out[var] = str(p.threads_per_proc)
    if "torch.distributed.run" in cmd:
        out.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SAVE_GRACE_S))
    return out


def scontrol_record(*what: str) -> dict[str, str]:
    """``scontrol -o show <what>`` as a dict (``JobState=RUNNING Requeue=1 NodeList=n[1-2]
    ...``); {} when scontrol is missing or fails. Only values without spaces are read reliably."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", *what], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(re.findall(r"(?:^|\s)([A-Za-z:/]+)=(\S*)", out.splitlines()[0] if out else ""))


def preemption_problem(job: Mapping[str, str], partition: Mapping[str, str]) -> str | None:
    """Why a pre-emption of this job would end it for good (PREEMPTED, not requeued), or None.

    ``job``/``partition``: :func:`scontrol_record` of the job and of its partition."""
    modes = set(partition.get("PreemptMode", "OFF").upper().split(","))
    if not modes <= PREEMPT_RESUMES:
        return (f"partition {partition.get('PartitionName', '?')} pre-empts by "
                f"PreemptMode={partition['PreemptMode']}: a pre-empted job ends PREEMPTED")
    if "REQUEUE" in modes and job.get("Requeue") == "0":
        return ("the job may not be requeued (Requeue=0: sbatch --no-requeue, or the cluster's "
                "JobRequeue=0 without --requeue): a pre-empted job ends PREEMPTED")
    return None


def attempt_header(attempt: int, env: Mapping[str, str]) -> str:
    """The line that opens one attempt's output in the training log, which keeps every attempt
    (a pre-empted one included): Snakemake's attempt, and SLURM's job and requeue count (a job
    that SLURM requeues runs again under the same Snakemake attempt)."""
    job = env.get("SLURM_JOB_ID")
    where = f"SLURM job {job} (restart {env.get('SLURM_RESTART_COUNT', '0')}) on " if job else ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"===== attempt {attempt}: {where}{socket.gethostname()} at {stamp} ====="


def check_requeue(job: Mapping[str, str], require: bool) -> None:
    """Refuse (``require``) or flag a SLURM job that a pre-emption would end for good."""
    partition = scontrol_record("partition", job["Partition"]) if job.get("Partition") else {}
    if not partition:
        print("launch: note: scontrol shows no job/partition record: cannot check that a "
              "pre-emption would requeue this job", file=sys.stderr, flush=True)
        return
    problem = preemption_problem(job, partition)
    if problem is None:
        return
    advice = (f"{problem}, and snakemake-executor-plugin-slurm polls a PREEMPTED job for ever. "
              "Train on a partition or QOS that requeues (PreemptMode=REQUEUE) or is not "
              "pre-empted (profiles/slurm: train_model's slurm_partition, or --qos in its "
              "slurm_extra), or accept it with `require_requeue: 0` for train_model in "
              "profiles/slurm (a pre-empted job then waits for `scontrol requeue <jobid>`)")
    if require:
        sys.exit(f"launch: error: {advice}")
    print(f"launch: warning: {advice}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        split = argv.index("--")
        own, train_args = argv[:split], argv[split + 1:]
    else:
        own, train_args = argv, []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1, help="nodes requested (config cluster.nodes)")
    ap.add_argument("--gpus-per-node", type=int, default=0,
                    help="GPUs requested per node (config cluster.gpus_per_node); 0 = CPU")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 1,
                    help="CPUs of this node's task (the rule's threads; SLURM_CPUS_PER_TASK "
                         "wins), shared by the processes of the node")
    ap.add_argument("--attempt", type=int, default=None,
                    help="Snakemake's attempt number: heads the attempt's output in the log and "
                         "is passed on to the trainer (its --attempt)")
    ap.add_argument("--require-requeue", type=int, choices=(0, 1), default=1,
                    help="under SLURM: 1 = refuse to start a job that a pre-emption would end "
                         "for good (PREEMPTED, not requeued); 0 = only warn")
    ap.add_argument("--module", default=DEFAULT_MODULE, help="python module to run")
    ap.add_argument("--print-only", action="store_true", help="print the command, do not run it")
    args = stage_options.parse_args(ap, own)
    env = dict(os.environ)
    job = scontrol_record("job", env["SLURM_JOB_ID"]) if env.get("SLURM_JOB_ID") else {}
    if job.get("Restarts", "").isdigit():   # the jobstep's srun does not pass it on
        env.setdefault("SLURM_RESTART_COUNT", job["Restarts"])
    if args.attempt is not None:
        print(attempt_header(args.attempt, env), file=sys.stderr, flush=True)
        train_args = ["--attempt", str(args.attempt), *train_args]
    if env.get("SLURM_JOB_ID"):
        check_requeue(job, bool(args.require_requeue))
    try:
        lp = launch_plan(env, args.nodes, args.gpus_per_node, args.cpus, job.get("NodeList"))
    except AllocationMismatch as e:
        sys.exit(f"launch: error: {e}")
    if len(lp.hosts) > lp.nodes:
        print(f"launch: note: the allocation holds {len(lp.hosts)} nodes, config "
              f"cluster.nodes = {lp.nodes}: the others stay idle", file=sys.stderr, flush=True)
    if args.gpus_per_node and lp.gpus_per_node != args.gpus_per_node:
        print(f"launch: note: config asks for {args.gpus_per_node} GPUs per node, the job sees "
              f"{lp.gpus_per_node}: {lp.procs_per_node} process(es) per node",
              file=sys.stderr, flush=True)
    cmd = build_command(train_args, env, lp, args.module)
    child = child_env(env, cmd, lp)
    threads = " ".join(f"{v}={child[v]}" for v in THREAD_VARS[:2])
    print(f"launch: {threads}", " ".join(cmd), file=sys.stderr, flush=True)
    if args.print_only:
        print(" ".join(cmd))
        return
    os.execvpe(cmd[0], cmd, child)


if __name__ == "__main__":
    main()
