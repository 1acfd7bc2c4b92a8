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
from torch.autograd.function import once_differentiable

from pipeline_lib.vocab import PAD_ID

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
    return _LabelSmoothedNLL.apply(logits, target, epsilon, ignore_index)


class _LabelSmoothedNLL(torch.autograd.Function):
    """The loss above, with a backward written for it.

    WHY: autograd's backward of the plain expression fills two (B*T, V) tensors (gather's
    zero-filled scatter target and the smoothing sum's broadcast) and adds them before
    log_softmax's backward, passes over the whole output layer. This backward writes the same
    gradient of the log-probabilities into one buffer, each number computed with the same
    operations in the same order (the ``+ 0.0`` turns -0.0 into 0.0 as the zero fill did), and
    then calls log_softmax's own backward kernel (``torch._log_softmax_backward_data``, the op
    autograd calls), so losses and gradients are bit-identical to autograd's
    (tests/unit/training/test_optim.py compares them) and a tiny CPU update is 9 % faster
    (bench/RESULTS.md).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                ignore_index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_probs = F.log_softmax(logits.float(), dim=-1)          # (B, T, V), fp32 even under bf16
        lprobs = log_probs.view(-1, log_probs.size(-1))            # (B*T, V)
        target = target.reshape(-1)                                # (B*T,)
        mask = target != ignore_index
        keep = mask.to(lprobs.dtype)
        index = target.clamp(min=0).unsqueeze(-1)                  # (B*T, 1)
        nll = -lprobs.gather(-1, index).squeeze(-1)                # (B*T,)
        smooth = -lprobs.sum(-1)                                   # (B*T,)
        eps_i = epsilon / (lprobs.size(-1) - 1)
        loss = (1.0 - epsilon - eps_i) * nll + eps_i * smooth
        ctx.save_for_backward(log_probs, index, keep)
        ctx.coef = (1.0 - epsilon - eps_i, eps_i)
        ctx.logits_dtype = logits.dtype
        ctx.set_materialize_grads(False)
        return (loss * keep).sum(), (nll * keep).sum(), mask.sum()

    @staticmethod
    @once_differentiable
    def backward(ctx, g_loss: torch.Tensor | None, g_nll: torch.Tensor | None, _: None
                 ) -> tuple[torch.Tensor, None, None, None]:
        log_probs, index, keep = ctx.saved_tensors
        c_nll, eps_i = ctx.coef
        zero = torch.zeros((), device=keep.device)
        g = (zero if g_loss is None else g_loss).expand_as(keep) * keep     # d sum / d loss (B*T,)
        every = -(g * eps_i) + 0.0                                 # smoothing: every class
        at_target = -(g * c_nll)                                   # nll: the target class
        if g_nll is not None:                                      # the summed NLL's own gradient
            at_target = at_target + -(g_nll.expand_as(keep) * keep)
        grad = every[:, None].expand(-1, log_probs.size(-1)).contiguous()   # (B*T, V)
        grad.scatter_add_(-1, index, at_target[:, None])
        grad = torch._log_softmax_backward_data(grad.view_as(log_probs), log_probs, -1,
                                                log_probs.dtype)
        return grad.to(ctx.logits_dtype), None, None, None
