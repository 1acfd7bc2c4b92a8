"""torch.compile compiles once for every batch shape (pipeline_lib/training/compiled.py): over
200 real Bible batches of the tiny run's sentence shards, with as many shapes as the token
budget makes, the count of graphs stays within a small bound. The backend under the counter is
eager (what is counted is dynamo's graphs and recompilations, which the backend does not
decide), so the test needs no C++ compiler and runs in seconds per batch on a CPU."""

from __future__ import annotations

import itertools

import pytest
import torch

from pipeline_lib.models import ModelConfig, build_model
from pipeline_lib.models.inputs import inputs_for
from pipeline_lib.training.compiled import compile_model
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader
from pipeline_lib.training.optim import label_smoothed_nll

BATCHES = 200
GRAPH_BOUND = 3   # two on the Bible's batches: the first, then one recompile for a size guard


def _batches(loader: TrainLoader, n: int):
    """``n`` batches, epoch after epoch."""
    def epochs():
        for epoch in itertools.count():
            for _, b in loader.iterate(DataPosition(epoch, 0)):
                yield b
    return itertools.islice(epochs(), n)


@pytest.mark.slow
def test_compile_counts_a_bounded_number_of_graphs_over_200_bible_batches(tiny_pipeline):
    torch.set_num_threads(1)
    torch.manual_seed(1)
    results = tiny_pipeline / "results"
    spm = results / "train_bpe" / "spm.model"
    model = build_model(ModelConfig(vocab_size=500, d_model=16, n_heads=2, d_ff=32,
                                    enc_layers=1, dec_layers=1, name="transformer"))
    loader = TrainLoader(results / "make_shards" / "bible" / "sent" / "train",
                         LoaderConfig(max_tokens=256, inputs=inputs_for(model, spm)))
    forward, count = compile_model(model, backend=lambda gm, _: gm.forward)
    shapes = set()
    for batch in _batches(loader, BATCHES):
        shapes.add((tuple(batch.src.shape), tuple(batch.tgt_in.shape)))
        loss, _, _ = label_smoothed_nll(forward(batch).logits, batch.tgt_out, 0.1)
        loss.backward()
    assert len(shapes) >= 50, f"only {len(shapes)} batch shapes: the test shows nothing"
    assert 1 <= count.graphs <= GRAPH_BOUND, (
        f"{count.graphs} graphs compiled for {len(shapes)} shapes in {BATCHES} batches")
