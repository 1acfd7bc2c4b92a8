"""``torch.compile`` for training: one graph for every batch shape, and a count of compilations.

WHY dynamic shapes from the start: batches vary in rows and lengths (token budgets, length
buckets), so a graph compiled for the first batch's shape fails its guards on the second.
torch.compile then recompiles with those sizes symbolic, and each compilation of a base model
on CUDA took about 50 s (issue 29: 49.6 s and 52.2 s for the first two updates on an H100).
``dynamic=True`` marks the sizes symbolic at the first compilation; on the Bible's batches the
graph count then stays at two over hundreds of shapes (tests/unit/training/test_compiled.py
holds it to a bound). Whether a compiled update beats the eager one on a GPU is measured by
bench/gpu_check.sh, so ``train.compile`` is off by default until then.

:class:`CompileCount` wraps the backend so that every compilation (the first and each
recompilation) is counted; the trainer writes the count into its train records and manifest,
so a run that recompiles per shape shows it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class CompileCount:
    """A torch.compile backend that counts the graphs it is given and hands them on."""

    def __init__(self, backend: str | Callable = "inductor") -> None:
        self.graphs = 0
        self.inner = backend

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        self.graphs += 1
        if callable(self.inner):
            return self.inner(gm, example_inputs)
        from torch._dynamo.backends.registry import lookup_backend

        return lookup_backend(self.inner)(gm, example_inputs)


def compile_model(model: torch.nn.Module, backend: str | Callable = "inductor"
                  ) -> tuple[Callable, CompileCount]:
    """``model`` compiled with symbolic sizes, and the counter of its compilations."""
    count = CompileCount(backend)
    return torch.compile(model, backend=count, dynamic=True), count
