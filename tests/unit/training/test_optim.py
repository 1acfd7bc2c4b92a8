"""Schedule, optimiser and label-smoothed loss against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline_lib.training.optim import (build_optimizer, build_scheduler, inverse_sqrt_factor,
                                label_smoothed_nll)


def test_inverse_sqrt_schedule_values():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = build_optimizer([p], lr=1e-3)
    sched = build_scheduler(opt, warmup=4)
    lrs = []
    for _ in range(8):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    # update k uses lr * min(k/4, sqrt(4/k)): warm-up 0.25, 0.5, 0.75, 1 then decay
    expect = [1e-3 * min(k / 4, math.sqrt(4 / k)) for k in range(1, 9)]
    assert lrs == pytest.approx(expect)
    assert inverse_sqrt_factor(3, 4) == 1.0 and inverse_sqrt_factor(15, 4) == pytest.approx(0.5)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9


def test_optimizer_skips_frozen_and_refuses_empty():
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    b.requires_grad_(False)
    opt = build_optimizer([a, b], lr=1.0)
    assert [len(g["params"]) for g in opt.param_groups] == [1]
    with pytest.raises(ValueError, match="no trainable"):
        build_optimizer([b], lr=1.0)


def test_label_smoothing_by_hand():
    logits = torch.tensor([[[2.0, 0.0, 1.0, -1.0], [0.5, 0.5, 0.5, 0.5]]])  # (1, 2, 4)
    target = torch.tensor([[2, 0]])  # second position is PAD (0): ignored
    loss, nll, n = label_smoothed_nll(logits, target, epsilon=0.1)
    lp = torch.log_softmax(logits[0, 0], -1)
    eps_i = 0.1 / 3
    expect = (1 - 0.1 - eps_i) * -lp[2] + eps_i * -lp.sum()
    assert n == 1
    assert float(nll) == pytest.approx(float(-lp[2]))
    assert float(loss) == pytest.approx(float(expect))
    loss0, nll0, _ = label_smoothed_nll(logits, target, epsilon=0.0)
    assert float(loss0) == pytest.approx(float(nll0))


def _autograd_loss(logits, target, epsilon, ignore_index=0):
    """The loss as the plain expression, differentiated by autograd (what the hand-written
    backward must reproduce bit for bit)."""
    lprobs = torch.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))
    target = target.reshape(-1)
    keep = (target != ignore_index).to(lprobs.dtype)
    nll = -lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    eps_i = epsilon / (lprobs.size(-1) - 1)
    loss = (1.0 - epsilon - eps_i) * nll + eps_i * -lprobs.sum(-1)
    return (loss * keep).sum(), (nll * keep).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("which", ["loss", "loss/n", "nll", "both"])
def test_loss_gradient_is_autograds_bit_for_bit(dtype, which):
    torch.manual_seed(0)
    logits = torch.randn(4, 9, 300).to(dtype)
    target = torch.randint(4, 300, (4, 9))
    target[0, 5:] = 0                                  # padding rows get zero gradient
    grads, values = [], []
    for fn in (label_smoothed_nll, _autograd_loss):
        x = logits.clone().requires_grad_()
        loss, nll = fn(x, target, 0.1)[:2]
        out = {"loss": loss, "loss/n": loss / 31, "nll": nll, "both": loss / 7 + nll}[which]
        out.backward()
        grads.append(x.grad)
        values.append((loss.detach(), nll.detach()))
    assert torch.equal(values[0][0], values[1][0]) and torch.equal(values[0][1], values[1][1])
    assert grads[0].dtype == dtype
    bits = torch.int32 if dtype == torch.float32 else torch.int16   # -0.0 and 0.0 differ too
    assert torch.equal(grads[0].view(bits), grads[1].view(bits))
    assert grads[0][0, 5:].abs().max() == 0
