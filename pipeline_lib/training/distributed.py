"""One process per device under torchrun; reductions that keep values on the device.

WHY tensors, not floats: ``float(t)`` / ``.item()`` waits for the GPU. The trainer reduces its
per-step counts as tensors and converts them to Python numbers only when it logs, saves or
decides to stop. Decisions every rank must take alike on every step (has any rank run out of
data, has any rank been signalled) are host numbers: under NCCL they go over a second, gloo
process group on the CPU, so they never queue behind the GPU's work or wait for it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    #: process group for host decisions (gloo beside NCCL); None: the default group, on the CPU
    host_group: Any = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_pref: str) -> tuple[DistInfo, torch.device]:
    """This process's rank and device (env WORLD_SIZE/RANK/LOCAL_RANK, set by torchrun)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device_pref == "auto" else device_pref.startswith("cuda")
    device = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    if use_cuda:
        cuda_allocator_defaults()
        torch.cuda.set_device(device)
    host_group = None
    if world > 1:
        if not dist.is_initialized():
            dist.init_process_group("nccl" if use_cuda else "gloo")
        if dist.get_backend() != "gloo":
            host_group = dist.new_group(backend="gloo")
    return DistInfo(rank, world, local, host_group), device


def cuda_allocator_defaults() -> None:
    """Expandable segments for PyTorch's CUDA allocator, unless PYTORCH_CUDA_ALLOC_CONF says
    otherwise. WHY: every batch has other (rows, length) sizes, and the logits alone are hundreds
    of MB at 16k tokens; with fixed-size segments a size that no cached block fits costs a
    cudaMalloc, and a full cache a cudaFree that waits for the device, a cost a CPU run never
    sees. Expandable segments grow one mapping instead. Suspected, not yet measured, as part of
    the GPU-only cost of issue 29: bench/gpu_check.sh times the trainer with and without it.
    The variable is read when the allocator starts (the first CUDA allocation), so this runs
    before the process touches the device."""
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def all_reduce(value: torch.Tensor, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """``value`` reduced over ranks (``op`` in sum/min/max), on its device; itself on one process."""
    if info.world_size == 1:
        return value
    value = value.clone()
    dist.all_reduce(value, op=_OPS[op])
    return value


def all_reduce_float(value: float, info: DistInfo, op: str = "sum") -> float:
    """A host number reduced over ranks (a decision every rank must take alike), on the CPU
    through ``info.host_group``: no device copy, so no wait for the device's queued work."""
    if info.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=_OPS[op], group=info.host_group)
    return float(t)


def barrier(info: DistInfo) -> None:
    if info.world_size > 1:
        dist.barrier()
