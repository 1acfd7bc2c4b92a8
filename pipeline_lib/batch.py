"""The tensor batch that the data loader builds and every model consumes, and the data modes
that decide how a loader builds it.

Sentence-level models read ``src``/``tgt_in``/``tgt_out``; context-aware models also read the
optional fields (left ``None`` when a loader or task does not provide them). Shapes use
B = batch, S = source length, T = target length, C = context length.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

import torch


class DataMode(str, Enum):
    """What a model reads besides the sentence pair, so the trainer and decoder pick the loader:
    SENTENCE (transformer, dbsa), CONTEXT (previous source sentences: doct, camn), STREAM
    (document streams across batches: cache), DOCUMENT (whole sub-documents: crosstask)."""

    SENTENCE = "sentence"
    CONTEXT = "context"
    STREAM = "stream"
    DOCUMENT = "document"


# --- Batch.extra keys shared by the data loader, the decoder and the models ---
EXTRA_DOC_START = "doc_start"   # (B,) bool: row starts a new document (document-stream batches)
EXTRA_DOC_SLOT = "doc_slot"     # (B,) long: document slot of each row (decode.translate_documents)
EXTRA_LANE = "lane"             # (B,) long: document stream (lane) of each row (training streams)
EXTRA_LANES = "lanes"           # int: lanes of the stream a training batch belongs to


@dataclass
class Batch:
    src: torch.Tensor                          # (B, S) long, PAD_ID padded, ends with EOS
    tgt_in: torch.Tensor                       # (B, T) long, BOS + target
    tgt_out: torch.Tensor                      # (B, T) long, target + EOS (loss labels)
    doc_id: list[str] = field(default_factory=list)      # per row, for document order
    sent_idx: list[int] = field(default_factory=list)
    ctx_src: torch.Tensor | None = None        # (B, C) previous source sentence(s), concatenated
    src_heads: torch.Tensor | None = None      # (B, S) subword dependency head index, -1 = none
    tgt_heads: torch.Tensor | None = None      # (B, T) aligned to tgt_in positions, -1 = none
    extra: dict[str, Any] = field(default_factory=dict)  # model-specific inputs (documented there)

    def to(self, device: torch.device | str) -> "Batch":
        moved = {}
        for f in fields(self):
            v = getattr(self, f.name)
            moved[f.name] = v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        # non_blocking for the model's extra tensors too: a blocking copy of a pinned batch
        # waits for all the device's queued work, once per step
        moved["extra"] = {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
                          for k, v in self.extra.items()}
        return Batch(**moved)

    def pin_memory(self) -> "Batch":
        """Page-locked copies (DataLoader's pin_memory calls this), so ``to(cuda,
        non_blocking=True)`` overlaps the copy with compute."""
        pinned = {f.name: getattr(self, f.name) for f in fields(self)}
        for k, v in pinned.items():
            if isinstance(v, torch.Tensor):
                pinned[k] = v.pin_memory()
        pinned["extra"] = {k: v.pin_memory() if isinstance(v, torch.Tensor) else v
                           for k, v in self.extra.items()}
        return Batch(**pinned)

    @property
    def num_tgt_tokens(self) -> int:
        return int((self.tgt_out != 0).sum())
