"""Typed model configuration shared by the trainer, the checkpoint and the decoder.

Sizes live in the config (``model_sizes``: tiny/base/big in config/config.yaml, a preset's own
in its file), never in code, so that a checkpoint's ``config.yaml`` alone says what was trained.
"""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")


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


def parse_extras(cls: type[T], extras: dict[str, Any], model: str, **kwargs: Any) -> T:
    """``ModelConfig.extras`` as the model's typed extras dataclass ``cls``.

    WHY one helper: every model validates its extras the same way, so a typo'd key, a string
    where a number belongs or an unknown enum value fails with the model's name, the key and the
    allowed values instead of surfacing as an error deep inside training. Range checks that only
    one model knows stay in its dataclass's ``__post_init__``. ``kwargs`` are further constructor
    arguments that do not come from the config."""
    known = {f.name for f in fields(cls)} - set(kwargs)
    unknown = sorted(set(extras) - known)
    if unknown:
        raise ValueError(f"{model}: unknown extras {unknown}; known keys are {sorted(known)}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, value in extras.items():
        values[key] = _coerce(model, key, value, hints[key])
    return cls(**values, **kwargs)


def _coerce(model: str, key: str, value: Any, hint: Any) -> Any:
    """``value`` checked against the annotation ``hint`` (int, float, bool, str, an Enum, or an
    Optional of one); enums are built from their values."""
    options = [h for h in typing.get_args(hint) if h is not type(None)] if typing.get_args(hint) else [hint]
    if value is None:
        if type(None) in typing.get_args(hint):
            return None
        raise ValueError(f"{model}: {key} may not be null")
    for h in options:
        if isinstance(h, type) and issubclass(h, Enum):
            try:
                return h(value)
            except ValueError:
                raise ValueError(f"{model}: {key}={value!r}; choose one of "
                                 f"{[e.value for e in h]}") from None
        if h is bool and isinstance(value, bool):
            return value
        if h is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if h is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if h is str and isinstance(value, str):
            return value
    names = " or ".join(getattr(h, "__name__", str(h)) for h in options)
    raise ValueError(f"{model}: {key}={value!r} is not a {names}")
