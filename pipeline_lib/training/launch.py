"""Start the trainer with one process per granted GPU: plain python, torchrun, or srun + torchrun.

WHY a library function: the same training rule runs on a laptop (no GPU), one GPU, one node with
several GPUs, or several SLURM nodes. The rule stays one line
(``python -m pipeline_lib.training.launch --nodes 1 --gpus-per-node 4 -- --config ... --out-dir ...``)
and this module decides, from the SLURM environment of the job (what the scheduler actually
granted) and the config (what was asked for), which command runs the trainer. The decision is a
pure function of its inputs, so it is unit-tested without a cluster.

Pre-emption: the process ``exec``s the built command, so the SIGTERM that SLURM sends to the job
step (``--signal=TERM@120`` in profiles/slurm, and on pre-emption) reaches torchrun/python
directly; the trainer saves a checkpoint and the job is requeued (``--requeue``) or retried by
Snakemake.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

DEFAULT_MODULE = "pipeline_lib.training.train"
RDZV_PORT = 29500


@dataclass(frozen=True)
class LaunchPlan:
    """How many machines and processes per machine the trainer gets."""

    nodes: int
    procs_per_node: int
    gpus_per_node: int


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


def plan(env: Mapping[str, str], nodes: int = 1, gpus_per_node: int = 0) -> LaunchPlan:
    """Combine the job's environment with the requested shape (config ``cluster``)."""
    granted_nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or nodes)
    gpus = granted_gpus(env, gpus_per_node)
    return LaunchPlan(nodes=max(1, granted_nodes), procs_per_node=max(1, gpus), gpus_per_node=gpus)


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
    nodes: int = 1,
    gpus_per_node: int = 0,
    module: str = DEFAULT_MODULE,
    python: str = sys.executable,
) -> list[str]:
    """The argv that starts ``python -m <module> <train_args>`` with the right process layout."""
    p = plan(env, nodes, gpus_per_node)
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
    return [
        "srun", f"--nodes={p.nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        *torchrun, f"--nnodes={p.nodes}", f"--nproc_per_node={p.procs_per_node}",
        f"--rdzv_id={env['SLURM_JOB_ID']}", "--rdzv_backend=c10d",
        f"--rdzv_endpoint={host}:{port}", *target,
    ]


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
    ap.add_argument("--module", default=DEFAULT_MODULE, help="python module to run")
    ap.add_argument("--print-only", action="store_true", help="print the command, do not run it")
    args = ap.parse_args(own)
    cmd = build_command(train_args, os.environ, args.nodes, args.gpus_per_node, args.module)
    print("launch:", " ".join(cmd), file=sys.stderr, flush=True)
    if args.print_only:
        print(" ".join(cmd))
        return
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
