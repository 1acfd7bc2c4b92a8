"""The one model registry: name in ``ModelConfig.name`` -> class. Context-aware models add theirs here."""

from __future__ import annotations

from torch import nn

from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {
    "transformer": Transformer,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    try:
        cls = MODELS[cfg.name]
    except KeyError:
        raise ValueError(f"unknown model {cfg.name!r}; registered: {sorted(MODELS)}") from None
    return cls(cfg)
