"""What every model's ``forward`` returns, so the trainer never needs to know which model it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ModelOutput:
    logits: torch.Tensor                          # (B, T, V) unnormalised scores over the vocabulary
    aux_loss: torch.Tensor | None = None          # added to the CE loss by the trainer when not None
    # 0-d tensors, averaged over the updates of a log record (e.g. parse arc accuracy); tensors,
    # not floats, so that a training step never waits for the device
    aux_metrics: dict[str, torch.Tensor] = field(default_factory=dict)
