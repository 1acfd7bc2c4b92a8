"""The two-step check shared by the source-context models' tests (DocT, CAMN): a copy task whose
first target token (a marker, 30 or 31) only a context token (4 or 5) tells, so a sentence-level
model stays at chance on it and a context model's second step, sentence-level parameters
frozen, must learn it through its context path alone."""

from __future__ import annotations

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.training.optim import build_optimizer, label_smoothed_nll
from pipeline_lib.vocab import BOS_ID, EOS_ID

#: the models' size for the task (tiny, no dropout: a deterministic learning curve)
SIZE = dict(vocab_size=40, d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2,
            dropout=0.0, max_len=32)


def marker_task(B: int, gen: torch.Generator) -> Batch:
    """target = [marker] + src, where the marker (30 or 31) is given only by a context token (4/5)."""
    src = torch.randint(10, 30, (B, 5), generator=gen)
    flag = torch.randint(0, 2, (B,), generator=gen)
    ctx = torch.cat([torch.randint(10, 30, (B, 3), generator=gen), (4 + flag)[:, None],
                     torch.randint(10, 30, (B, 2), generator=gen), torch.full((B, 1), EOS_ID)], 1)
    tgt = torch.cat([(30 + flag)[:, None], src], 1)
    return Batch(src=torch.cat([src, torch.full((B, 1), EOS_ID)], 1),
                 tgt_in=torch.cat([torch.full((B, 1), BOS_ID), tgt], 1),
                 tgt_out=torch.cat([tgt, torch.full((B, 1), EOS_ID)], 1), ctx_src=ctx)


def train_on_markers(model: torch.nn.Module, steps: int, lr: float, gen: torch.Generator) -> None:
    """``steps`` Adam updates on fresh batches of 32 (frozen parameters get no gradient)."""
    opt = build_optimizer([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        b = marker_task(32, gen)
        opt.zero_grad(set_to_none=True)
        loss, _, n = label_smoothed_nll(model(b).logits, b.tgt_out, 0.0)
        (loss / n).backward()
        opt.step()


@torch.no_grad()
def marker_accuracy(model: torch.nn.Module, gen: torch.Generator) -> tuple[float, float]:
    """(accuracy on the marker, on the copied tokens) over 1,000 fresh sentences."""
    model.eval()
    b = marker_task(1000, gen)
    pred = model(b).logits.argmax(-1)
    return (float((pred[:, 0] == b.tgt_out[:, 0]).float().mean()),
            float((pred[:, 1:] == b.tgt_out[:, 1:]).float().mean()))
