"""Start the trainer with one process per granted GPU: plain python, torchrun, or srun + torchrun.

WHY a library function: the same training rule runs on a laptop (no GPU), one GPU, one node with
several GPUs, or several SLURM nodes. The rule stays one line
(``python -m pipeline_lib.training.launch --nodes 1 --gpus-per-node 4 --cpus 32 -- --config ...``)
and this module decides, from the SLURM environment of the job (what the scheduler actually
granted) and the config (what was asked for), which command runs the trainer and how many CPU
threads each of its processes gets. The decision is a pure function of its inputs, so it is
unit-tested without a cluster.

Several nodes: the rule's shell runs inside the job step that snakemake-executor-plugin-slurm
starts (``srun -n1 ... snakemake``, one task on the first node holding all its CPUs), so a second
``srun`` for the trainer's tasks would wait for those CPUs forever. It asks for ``--overlap``
(share the step's resources; the step only waits for the trainer) and for one task per node, each
a torchrun that starts one process per GPU of its node.

Pre-emption: the rule ``exec``s this module and this module ``exec``s the built command, so the
SIGTERM that SLURM sends to every process of the job step (``--signal=TERM@120`` in
profiles/slurm, and on pre-emption) reaches torchrun/python, not a shell that would die at once
and end the step before the trainer has saved. The trainer saves ``checkpoints/last`` and exits
143; torchrun waits ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds for its workers to save before it
kills them (``SAVE_GRACE_S`` here, not torch's 30).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_MODULE = "pipeline_lib.training.train"
RDZV_PORT = 29500
# Seconds torchrun gives its workers to save after SIGTERM before it SIGKILLs them: under the
# 120 s that profiles/slurm's --signal=TERM@120 leaves before the time limit.
SAVE_GRACE_S = 110
# SLURM variables that name the job; every other SLURM_* in a job step describes that step
# (its tasks, CPUs, GPUs) and must not shape the trainer's own step (the plugin's jobstep
# executor keeps the same set for its srun).
JOB_IDENTITY = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST"}


@dataclass(frozen=True)
class LaunchPlan:
    """How many machines, processes per machine and CPUs per machine the trainer gets."""

    nodes: int
    procs_per_node: int
    gpus_per_node: int
    cpus_per_node: int

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


def plan(env: Mapping[str, str], nodes: int = 1, gpus_per_node: int = 0,
         cpus: int = 1) -> LaunchPlan:
    """Combine the job's environment with the requested shape (config ``cluster``, threads)."""
    granted_nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or nodes)
    gpus = granted_gpus(env, gpus_per_node)
    return LaunchPlan(nodes=max(1, granted_nodes), procs_per_node=max(1, gpus), gpus_per_node=gpus,
                      cpus_per_node=granted_cpus(env, cpus))


def first_host(nodelist: str) -> str:
    """First host of a SLURM node list (``gpu[003-004,010],cpu1`` -> ``gpu003``).

    WHY not ``scontrol show hostnames``: the rendezvous host is needed before any process starts,
    and this one-line expansion covers SLURM's compressed syntax without another subprocess.
    """
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError(f"cannot parse SLURM node list {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def build_command(
    train_args: Sequence[str],
    env: Mapping[str, str],
    p: LaunchPlan,
    module: str = DEFAULT_MODULE,
    python: str = sys.executable,
) -> list[str]:
    """The argv that starts ``python -m <module> <train_args>`` with the layout ``p``."""
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
    host = env.get("MASTER_ADDR") or first_host(env.get("SLURM_JOB_NODELIST", ""))
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
    """The environment ``cmd`` runs in: ``OMP_NUM_THREADS`` per trainer process, torchrun's
    save grace, and for a nested ``srun`` only the SLURM variables that name the job."""
    out = dict(env)
    if cmd[0] == "srun":
        out = {k: v for k, v in out.items()
               if not (k.startswith(("SRUN_", "SBATCH_"))
                       or (k.startswith("SLURM_") and k not in JOB_IDENTITY))}
    out["OMP_NUM_THREADS"] = str(p.threads_per_proc)
    if "torch.distributed.run" in cmd:
        out.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SAVE_GRACE_S))
    return out


def attempt_header(attempt: int, env: Mapping[str, str]) -> str:
    """The line that opens one attempt's output in the training log, which keeps every attempt
    (a pre-empted one included): Snakemake's attempt, and SLURM's job and requeue count (a job
    that SLURM requeues runs again under the same Snakemake attempt)."""
    job = env.get("SLURM_JOB_ID")
    where = f"SLURM job {job} (restart {env.get('SLURM_RESTART_COUNT', '0')}) on " if job else ""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"===== attempt {attempt}: {where}{socket.gethostname()} at {stamp} ====="


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
                    help="Snakemake's attempt number: print a header line for the log")
    ap.add_argument("--module", default=DEFAULT_MODULE, help="python module to run")
    ap.add_argument("--print-only", action="store_true", help="print the command, do not run it")
    args = ap.parse_args(own)
    if args.attempt is not None:
        print(attempt_header(args.attempt, os.environ), file=sys.stderr, flush=True)
    layout = plan(os.environ, args.nodes, args.gpus_per_node, args.cpus)
    cmd = build_command(train_args, os.environ, layout, args.module)
    env = child_env(os.environ, cmd, layout)
    print(f"launch: OMP_NUM_THREADS={env['OMP_NUM_THREADS']}", " ".join(cmd), file=sys.stderr,
          flush=True)
    if args.print_only:
        print(" ".join(cmd))
        return
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
