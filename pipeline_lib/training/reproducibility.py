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

import torch


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """SplitMix64's output function (Steele et al. 2014): a bijective 64-bit mix."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of update ``step`` (0-based) of process ``rank``: a hash of the three, so that
    seeds 1 and 2 do not share masks shifted by one update (as ``seed + step`` would) and DDP
    ranks draw different masks for their different batches. Below 2^63."""
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ step) ^ rank) >> 1


def seed_all(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators at the start of a run (initial weights,
    shuffles); each update's dropout is seeded again by :func:`seed_step`."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def seed_step(seed: int, step: int, device: torch.device, rank: int = 0) -> None:
    """Seed the generator dropout draws from on ``device`` for update ``step``. WHY not
    ``torch.manual_seed``: it also visits every other backend, 0.5 ms an update on our CPU
    against 5 us for the one generator used."""
    s = step_seed(seed, step, rank)
    if device.type == "cuda":
        torch.cuda.manual_seed(s)    # the current device: the trainer's (init_distributed)
    else:
        torch.default_generator.manual_seed(s)


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
