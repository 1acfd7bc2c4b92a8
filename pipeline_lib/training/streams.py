"""The trainer's data streams: sentence batches from ``--shards`` and, for a model with a second
task, its batches from ``--aux-shards`` (restoration instances, parallel documents).

WHY its own class: both streams roll over to their next epoch in step on every rank (a rank
whose shard part runs out first must not start a new epoch alone, or the ranks' updates stop
matching), and each keeps its position in the trainer state, so a resumed run reads on from the
batch after the last one it trained on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from pipeline_lib.batch import Batch
from pipeline_lib.models.inputs import ModelInputs
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader
from pipeline_lib.training.distributed import DistInfo, all_reduce_float


class Streams:
    """The main stream and, when ``aux_shards`` is given and ``aux_ratio`` > 0, the aux one."""

    def __init__(self, shards: str | Path, aux_shards: str | Path | None, cfg: LoaderConfig,
                 inputs: ModelInputs, info: DistInfo, aux_ratio: float) -> None:
        self.info = info
        # a document-level model reads sentence batches from --shards; its document-level
        # batches come from --aux-shards
        self.main = TrainLoader(shards, replace(cfg, inputs=inputs.sentence_batches()),
                                info.rank, info.world_size)
        self.aux = (TrainLoader(aux_shards, cfg, info.rank, info.world_size)
                    if aux_shards is not None and aux_ratio > 0 else None)
        self.iters: dict[bool, Iterator] = {}

    def start(self, state) -> None:
        """Iterate from the positions of ``state`` (a :class:`TrainerState`)."""
        self.iters = {False: self.main.iterate(state.position)}
        if self.aux is not None:
            self.iters[True] = self.aux.iterate(state.aux_position)

    def next_batch(self, aux: bool, state) -> Batch:
        """Next micro-batch of the main (or aux) stream; all ranks move to the next epoch
        together when any runs out. Updates the stream's position in ``state``."""
        while True:
            item = next(self.iters[aux], None)
            if all_reduce_float(float(item is not None), self.info, "min") > 0:
                if aux:
                    state.aux_position = item[0]
                else:
                    state.position = item[0]
                return item[1]
            pos = state.aux_position if aux else state.position
            pos = DataPosition(pos.epoch + 1, 0)
            if aux:
                state.aux_position = pos
                self.iters[aux] = self.aux.iterate(pos)
            else:
                state.position = pos
                self.iters[aux] = self.main.iterate(pos)

    def close(self) -> None:
        """Stop the loaders' worker processes (they would keep the interpreter from exiting)."""
        for loader in (self.main, self.aux):
            if loader is not None:
                loader.close()
