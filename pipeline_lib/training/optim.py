"""Optimiser, learning-rate schedule and loss of Vaswani et al. (2017), as the seed papers use them.

Adam with beta = (0.9, 0.98), eps = 1e-9; the inverse-square-root schedule with linear warm-up
(fairseq's ``inverse_sqrt``: lr rises linearly to ``lr`` over ``warmup`` updates, then decays as
``lr * sqrt(warmup / step)``); label-smoothed cross-entropy (Szegedy et al. 2016) with eps = 0.1.
Kept apart from the loop so that the document-level stages reuse exactly the same pieces.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F

from pipeline_lib.constants import PAD_ID

ADAM_BETAS = (0.9, 0.98)
ADAM_EPS = 1e-9


def build_optimizer(params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam over ``params`` (the caller passes trainable parameters only, so frozen ones get no
    optimiser state and no weight updates)."""
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("build_optimizer: no trainable parameters (is everything frozen?)")
    return torch.optim.Adam(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS)


def inverse_sqrt_factor(step: int, warmup: int) -> float:
    """Multiplier of the peak lr after ``step`` updates (``step`` counts from 0 in LambdaLR).

    Update k (1-based) uses ``min(k / warmup, sqrt(warmup / k))``, which is 1 at k = warmup.
    """
    k = step + 1
    if warmup <= 0:
        return 1.0 / math.sqrt(k)
    return min(k / warmup, math.sqrt(warmup / k))


def build_scheduler(optimizer: torch.optim.Optimizer, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: inverse_sqrt_factor(s, warmup))


def label_smoothed_nll(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed NLL over non-pad tokens, plus the token count.

    ``logits`` (B, T, V), ``target`` (B, T). fairseq's formulation: the smoothing mass
    ``epsilon`` is spread over the V-1 wrong classes, so
    ``loss = (1 - eps - eps/(V-1)) * nll + eps/(V-1) * sum_v -log p_v``. Sums (not means) are
    returned so that gradient accumulation and data parallelism can normalise by the global
    number of target tokens, as fairseq does. All three are 0-d tensors on the logits' device:
    padding is masked by multiplication, not by boolean indexing, so no step waits for the GPU.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1)           # (B, T, V), fp32 even under bf16
    lprobs = lprobs.view(-1, lprobs.size(-1))                 # (B*T, V)
    target = target.reshape(-1)                               # (B*T,)
    mask = target != ignore_index
    keep = mask.to(lprobs.dtype)
    nll = -lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B*T,)
    smooth = -lprobs.sum(-1)                                  # (B*T,)
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
    return (loss * keep).sum(), (nll * keep).sum(), mask.sum()
