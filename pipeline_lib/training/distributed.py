"""One process per device under torchrun; reductions that keep values on the device.

WHY tensors, not floats: ``float(t)`` / ``.item()`` waits for the GPU. The trainer reduces its
per-step counts as tensors and converts them to Python numbers only when it logs, saves or
decides to stop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

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
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistInfo(rank, world, local), device


def all_reduce(value: torch.Tensor, info: DistInfo, op: str = "sum") -> torch.Tensor:
    """``value`` reduced over ranks (``op`` in sum/min/max), on its device; itself on one process."""
    if info.world_size == 1:
        return value
    value = value.clone()
    dist.all_reduce(value, op=_OPS[op])
    return value


def all_reduce_float(value: float, info: DistInfo, device: torch.device, op: str = "sum") -> float:
    """A host number reduced over ranks (a decision every rank must take alike)."""
    if info.world_size == 1:
        return value
    return float(all_reduce(torch.tensor([value], dtype=torch.float64, device=device), info, op))


def barrier(info: DistInfo) -> None:
    if info.world_size > 1:
        dist.barrier()
