"""What makes a training run repeat bit for bit, and the record of it in the job's manifest.

Measured on the default run's stages (bench/RESULTS.md, "Reproducibility"): ingestion, BPE
encoding, noising and sharding write byte-identical files from run to run; training repeats bit
for bit on CPU given the seed, the number of intra-op threads, the DataLoader worker count and
the CPU's vector unit (ATen's CPU capability: AVX2, AVX-512, ...), and changes after a few
updates when the thread count or the capability differs (different summation orders). So those
are recorded beside the result (:func:`determinants`), and the dropout masks of an update depend
only on (seed, update, rank) (:func:`step_seed`), not on what drew from the global generator
before: a resumed run, or one whose loader draws differently, gets the same masks.

Not bit-reproducible: CUDA kernels that accumulate with atomics (scatter/index_add backward,
some cuBLAS and cuDNN algorithms) round differently from run to run unless
``torch.use_deterministic_algorithms(True)``, which the trainer does not set (it is slower and
refuses some ops); GPU runs repeat to within float rounding, not bit for bit.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np
import torch


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of update ``step`` (0-based) of process ``rank``: a hash of the three, so that
    seeds 1 and 2 do not share masks shifted by one update (as ``seed + step`` would) and DDP
    ranks draw different masks for their different batches."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(1, np.uint64)[0]
               >> np.uint64(1))


def seed_step(seed: int, step: int, rank: int = 0) -> None:
    """Seed torch's generators (CPU and every CUDA device) for update ``step``."""
    torch.manual_seed(step_seed(seed, step, rank))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def determinants(seed: int, num_workers: int, world_size: int,
                 device: torch.device) -> dict[str, Any]:
    """Everything besides code, config and data that decides the weights a run ends with."""
    record: dict[str, Any] = {
        "seed": seed,
        "dropout_seed": "per update: hash(seed, update, rank)",
        "torch": torch.__version__,
        "device": str(device),
        "world_size": world_size,
        "num_workers": num_workers,
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "autocast": "bf16" if device.type == "cuda" else "fp32",
    }
    if device.type == "cuda":
        record.update({
            "gpu": torch.cuda.get_device_name(device),
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        })
    record["bit_reproducible"] = (
        "yes: the same commit, config, data and these values give the same weights"
        if device.type == "cpu" else
        "no: CUDA kernels with atomic accumulation round differently from run to run")
    return record
