"""What every model's ``forward`` returns, so the trainer never needs to know which model it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class ModelOutput:
    logits: torch.Tensor                          # (B, T, V) unnormalised scores over the vocabulary
    aux_loss: torch.Tensor | None = None          # added to the CE loss by the trainer when not None
    aux_metrics: dict[str, float] = field(default_factory=dict)  # logged as-is (e.g. parse UAS)
