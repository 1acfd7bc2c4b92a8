"""When a training job stops: a plateau of a dev metric or the ``max_steps`` cap.

WHY a rule and not only a budget: the seed papers train the sentence-level model to convergence
before they add context (Zhang et al. 2018 Sec. 2.4, Tu et al. 2018 Sec. 3.4, Chen et al. 2021
Sec. 4.1). A baseline stopped while its dev loss still falls leaves gains that any further
training of all its parameters collects, so a fine-tune compared with a matched control then
measures the unfinished baseline, not the method. With a plateau rule the baseline trains until
the dev metric stops improving, and a fine-tune and its control each train to their own plateau
under the same rule (``pipeline_lib.plan``: same data, schedule and rule; the report shows both
budgets).

The rule (config ``train``): every ``validate_every`` updates the dev ``stop_metric`` (``loss``:
label-smoothed loss, ``nll``, or greedy ``bleu``) is compared with the best value so far.
``best`` is kept whenever it improves at all; the patience counter restarts only when it improves
by more than ``min_delta`` on the value at the last such restart (PyTorch Lightning's
EarlyStopping: small steady gains do not keep a run alive forever, and the best checkpoint still
follows them). After ``patience`` validations without such a gain the run stops (``plateau``);
``patience`` 0 never stops early (``max_steps``, the smoke regime). ``max_steps`` caps every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class StopMetric(str, Enum):
    """The dev metric the rule watches and ``checkpoints/best`` is chosen by."""

    LOSS = "loss"    # label-smoothed cross-entropy per target token (the training objective)
    NLL = "nll"      # negative log-likelihood per target token
    BLEU = "bleu"    # greedy dev BLEU (sacreBLEU); costs a decode per validation

    @property
    def higher_is_better(self) -> bool:
        return self is StopMetric.BLEU


class StopReason(str, Enum):
    """Why a job ended (manifest ``stop.reason``). A signal ends an attempt, not the job: the
    attempt saves and exits for requeue, writes no manifest, and the job's manifest lists it
    under ``stop.interruptions``."""

    PLATEAU = "plateau"
    MAX_STEPS = "max_steps"
    MAX_SECONDS = "max_seconds"   # train.max_seconds: a time-boxed run, finished like any other


@dataclass(frozen=True)
class StopRule:
    metric: StopMetric = StopMetric.LOSS
    patience: int = 0
    min_delta: float = 0.0
    max_steps: int = 500

    def __post_init__(self) -> None:
        if self.patience < 0 or self.min_delta < 0 or self.max_steps < 1:
            raise ValueError(f"stop rule needs patience >= 0, min_delta >= 0, max_steps >= 1: "
                             f"{self}")

    @property
    def worst(self) -> float:
        """The value every first validation improves on."""
        return -math.inf if self.metric.higher_is_better else math.inf

    def better(self, value: float, than: float, margin: float = 0.0) -> bool:
        """Whether ``value`` beats ``than`` by more than ``margin`` in the metric's direction."""
        return value > than + margin if self.metric.higher_is_better else value < than - margin

    def plateaued(self, bad_evals: int) -> bool:
        """``patience`` validations in a row without a gain larger than ``min_delta``."""
        return self.patience > 0 and bad_evals >= self.patience

    def to_dict(self) -> dict:
        return {"metric": self.metric.value, "patience": self.patience,
                "min_delta": self.min_delta, "max_steps": self.max_steps}


@dataclass
class Validation:
    """What one validation changes: a new best (save ``checkpoints/best``), a restart of the
    patience counter, the counter itself."""

    new_best: bool
    gained: bool
    bad_evals: int


def judge(rule: StopRule, value: float, best: float, reference: float,
          bad_evals: int) -> Validation:
    """One validation under ``rule``: ``best`` is the best value so far, ``reference`` the value
    at the last restart of the patience counter."""
    gained = rule.better(value, reference, rule.min_delta)
    return Validation(new_best=rule.better(value, best), gained=gained,
                      bad_evals=0 if gained else bad_evals + 1)
