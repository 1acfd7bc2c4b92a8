"""Two-step document-level training: start from the sentence-level model's weights and keep them
fixed (theta_s) while only the context modules are trained (Zhang et al. 2018, Sec. 2.4, Eq.
24-25; Tu et al. 2018, Sec. 3.4, fix the pre-trained model the same way). Which jobs do so is
config: ``model_settings.<job>.init_from`` and ``train.freeze``.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import torch

from pipeline_lib import checkpoint as ckpt

SENTENCE_LEVEL = "@sentence_level"   # train.freeze token: the model's sentence_level_prefixes()


def apply_freeze(model: torch.nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Freeze parameters whose name matches any fnmatch pattern (``encoder.*``); return them.

    Two-step document-level training freezes the sentence-level parameters theta_s and trains
    only the context modules; the pattern ``@sentence_level`` stands for the model's
    ``sentence_level_prefixes()`` (exactly theta_s)."""
    expanded: list[str] = []
    for pat in patterns:
        if pat == SENTENCE_LEVEL:
            if not hasattr(model, "sentence_level_prefixes"):
                raise ValueError(f"train.freeze {SENTENCE_LEVEL}: {type(model).__name__} has no "
                                 "sentence_level_prefixes()")
            expanded.extend(model.sentence_level_prefixes())
        else:
            expanded.append(pat)
    patterns = tuple(expanded)
    frozen = []
    for name, p in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, pat) for pat in patterns):
            p.requires_grad_(False)
            frozen.append(name)
    if patterns and not frozen:
        raise ValueError(f"train.freeze patterns {list(patterns)} match no parameter")
    return frozen


def init_from_checkpoint(model: torch.nn.Module, path: str | Path) -> dict[str, list[str]]:
    """Load a (sentence-level) checkpoint's weights into a new model, non-strictly: new modules
    keep their initialisation. Returns the missing/unexpected keys so the log shows them."""
    resolved = ckpt.resolve_checkpoint(path)
    if resolved is None:
        raise FileNotFoundError(f"train.init_from: no checkpoint at {path}")
    res = model.load_state_dict(ckpt.load_state(resolved), strict=False)
    return {"missing": list(res.missing_keys), "unexpected": list(res.unexpected_keys)}
