"""Validation measures (pipeline_lib/training/validation.py): how much of the dev NLL a model
owes to the source."""

from __future__ import annotations

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.registry import build_model
from pipeline_lib.training.validation import dev_loss


def _batch(srcs: list[list[int]], tgts: list[list[int]]) -> Batch:
    def pad(rows: list[list[int]]) -> torch.Tensor:
        out = torch.full((len(rows), max(map(len, rows))), PAD_ID)
        for i, r in enumerate(rows):
            out[i, :len(r)] = torch.tensor(r)
        return out

    return Batch(src=pad([s + [EOS_ID] for s in srcs]), tgt_in=pad([[BOS_ID] + t for t in tgts]),
                 tgt_out=pad([t + [EOS_ID] for t in tgts]))


def test_source_gain_is_zero_when_every_source_is_the_same_and_not_otherwise():
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict({"name": "transformer", "vocab_size": 40,
                                               "d_model": 16, "n_heads": 2, "d_ff": 32,
                                               "enc_layers": 1, "dec_layers": 1}))
    tgts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    same = dev_loss(model, [_batch([[20, 21]] * 3, tgts)], 0.1, torch.device("cpu"), True)
    assert same["source_gain"] == 0.0 and same["nll_other_source"] == same["nll"]
    other = dev_loss(model, [_batch([[20, 21], [30, 31, 32], [25]], tgts)], 0.1,
                     torch.device("cpu"), True)
    assert other["source_gain"] != 0.0 and other["nll"] == dev_loss(
        model, [_batch([[20, 21], [30, 31, 32], [25]], tgts)], 0.1, torch.device("cpu"))["nll"]
    lone = dev_loss(model, [_batch([[20, 21]], [[5, 6]])], 0.1, torch.device("cpu"), True)
    assert "source_gain" not in lone                 # one row: no other source to give it
