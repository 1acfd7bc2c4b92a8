"""The one model registry: name in ``ModelConfig.name`` -> class. Context-aware models add theirs here."""

from __future__ import annotations

from torch import nn

from pipeline_lib.models.cache import CacheTransformer
from pipeline_lib.models.camn import CAMNTransformer
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.crosstask import CrossTaskTransformer
from pipeline_lib.models.dbsa import DependencyTransformer
from pipeline_lib.models.doct import DocTransformer
from pipeline_lib.models.transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {
    "transformer": Transformer,
    "camn": CAMNTransformer,
    "doct": DocTransformer,
    "cache": CacheTransformer,
    "dbsa": DependencyTransformer,
    "crosstask": CrossTaskTransformer,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    try:
        cls = MODELS[cfg.name]
    except KeyError:
        raise ValueError(f"unknown model {cfg.name!r}; registered: {sorted(MODELS)}") from None
    return cls(cfg)
