"""Training records: ``metrics.jsonl`` (one JSON object per line) and TensorBoard scalars.

Per-step quantities are accumulated as tensors in a :class:`Window` and turned into numbers once
per ``log_every`` updates, so logging costs one device synchronisation per record, not per step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pipeline_lib.layout import METRICS_FILE

TB_DIR = "tb"


class MetricsLog:
    """metrics.jsonl + TensorBoard, written by the main process only."""

    def __init__(self, out_dir: Path, resume_step: int, enabled: bool):
        self.enabled = enabled
        self.path = out_dir / METRICS_FILE
        self.tb = None
        if not enabled:
            return
        if self.path.exists():  # drop records a killed run wrote after its last checkpoint
            kept = [ln for ln in self.path.read_text().splitlines()
                    if ln.strip() and json.loads(ln)["step"] <= resume_step]
            self.path.write_text("".join(k + "\n" for k in kept))
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(out_dir / TB_DIR), purge_step=resume_step + 1 if resume_step else None)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        for k, v in record.items():
            if k not in ("step", "split") and isinstance(v, (int, float)):
                self.tb.add_scalar(f"{record['split']}/{k}", v, record["step"])

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


class Window:
    """Sums of tensors (loss, tokens, model metrics) since the last log record."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, value: torch.Tensor | float) -> None:
        value = value.detach().float() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
        self.sums[name] = self.sums[name] + value if name in self.sums else value
        self.counts[name] = self.counts.get(name, 0) + 1

    def totals(self) -> dict[str, float]:
        """Every sum as a number, fetched in one transfer: one wait for the device per record
        however many metrics a model reports (``float()`` on each sum would wait once each)."""
        if not self.sums:
            return {}
        sums = list(self.sums.values())
        device = next((s.device for s in sums if s.device.type != "cpu"), torch.device("cpu"))
        return dict(zip(self.sums, torch.stack([s.to(device) for s in sums]).tolist()))
