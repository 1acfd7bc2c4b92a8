"""Typed model configuration shared by the trainer, the checkpoint and the decoder.

Sizes live in config/config.yaml (``model_presets``: tiny/base/big), never in code, so that a
checkpoint's ``config.yaml`` alone says what was trained.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of one model; ``extras`` carries the keys only a context-aware model reads.

    ``norm_first`` picks pre-norm (LayerNorm inside each residual branch, final LayerNorm on
    both stacks). The default is post-norm, the "base" Transformer of Vaswani et al. (2017) that
    the seed papers build on; pre-norm trains more stably for deep stacks or without warm-up.
    """

    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    enc_layers: int = 6
    dec_layers: int = 6
    dropout: float = 0.1
    name: str = "transformer"
    max_len: int = 1024
    share_embeddings: bool = True
    norm_first: bool = False
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.vocab_size < 4:
            raise ValueError(f"vocab_size={self.vocab_size} leaves no room for PAD/UNK/BOS/EOS")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        """Build from a YAML mapping; unknown keys are an error so that typos do not pass silently."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown keys {unknown}; known keys are {sorted(known)}")
        return cls(**{**d, "extras": dict(d.get("extras") or {})})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
