"""The trainer's state besides weights: what a checkpoint must hold so that a resumed run goes
on exactly as an uninterrupted one (position in both data streams, the stop rule's counters, the
best dev value and its step, the counts the manifest reports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pipeline_lib.training.data import DataPosition
from pipeline_lib.training.update import SUPERVISION


@dataclass
class TrainerState:
    """What, besides weights, a resumed run needs to continue exactly."""

    step: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    #: best dev value of the stop metric so far and its update (the weights in
    #: ``checkpoints/best`` and ``best-kept``); kept across a resume
    best_dev: float = math.inf
    best_step: int | None = None
    #: patience counter and the dev value at its last restart (stopping.judge)
    bad_evals: int = 0
    reference: float = math.inf
    tokens: int = 0
    #: the run ended (max_steps or early stop): a later start trains from scratch (resume.py),
    #: and why (a StopReason value), for a retry that only writes the outputs again
    finished: bool = False
    stop: str = ""
    aux_position: DataPosition = field(default_factory=DataPosition)
    #: parse supervision seen (models with ``inputs.heads``): tokens with a gold head / tokens
    supervision: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUPERVISION, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "position": self.position.to_dict(),
                "aux_position": self.aux_position.to_dict(), "best_dev": self.best_dev,
                "best_step": self.best_step, "bad_evals": self.bad_evals,
                "reference": self.reference, "tokens": self.tokens,
                "supervision": dict(self.supervision), "finished": self.finished,
                "stop": self.stop}

    @classmethod
    def from_dict(cls, ts: dict[str, Any]) -> "TrainerState":
        return cls(step=ts["step"], position=DataPosition.from_dict(ts["position"]),
                   best_dev=ts["best_dev"], best_step=ts.get("best_step"),
                   bad_evals=ts["bad_evals"], reference=ts.get("reference", ts["best_dev"]),
                   tokens=ts["tokens"],
                   aux_position=DataPosition.from_dict(ts.get("aux_position",
                                                              {"epoch": 0, "batches": 0})),
                   supervision={**dict.fromkeys(SUPERVISION, 0), **ts.get("supervision", {})},
                   finished=ts.get("finished", False), stop=ts.get("stop", ""))
