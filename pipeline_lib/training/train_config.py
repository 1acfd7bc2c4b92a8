"""A training job's settings (the ``train:`` section with the job's overrides), and what of them
makes a run the same run when it is started again.

WHY apart from the loop: the plan, the tests and the benchmarks build train configs without the
trainer, and the resume rule (which keys a resumed run may change) is a fact about the config.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from pipeline_lib.codehash import code_hash
from pipeline_lib.context_conditions import CONTEXT_CONDITIONS
from pipeline_lib.training.stopping import StopMetric, StopRule


@dataclass(frozen=True)
class TrainConfig:
    """The ``train:`` section of config.yaml (the schema describes each key; defaults agree with
    it and fit the CPU default run, config.yaml's comment gives the papers' values)."""

    max_tokens: int = 4096
    max_context_tokens: int | None = None
    update_freq: int = 1
    max_steps: int = 500
    max_seconds: float = 0.0             # 0: no time limit (per attempt)
    warmup: int = 200
    lr: float = 1e-3
    clip_norm: float = 0.0
    label_smoothing: float = 0.1
    seed: int = 1
    validate_every: int = 250
    save_every: int = 250
    log_every: int = 25
    keep_last: int = 3
    average_last_k: int = 0
    patience: int = 0
    min_delta: float = 0.0
    stop_metric: str = "loss"
    compile: bool = False                # off until a GPU measures it (compiled.py)
    phase_times: bool = False            # time each phase, synchronising the device (phases.py)
    num_workers: int = 2
    device: str = "auto"
    buffer_sents: int = 20000
    pad_multiple: int | None = None      # None: 8 on CUDA, 1 on CPU
    dev_bleu: bool = True
    init_from: str | None = None
    freeze: tuple[str, ...] = ()
    aux_ratio: float = 0.0
    # a matched control: the manifest of the job whose updates it trained (matched_budget)
    matched_to: str | None = None
    # the context a context-rule model reads in training and validation: its document's
    # ("true"), other documents' sentences ("random": a random-context twin) or none ("empty")
    context: str = "true"

    def __post_init__(self) -> None:
        if not 0.0 <= self.aux_ratio <= 1.0:
            raise ValueError(f"train.aux_ratio={self.aux_ratio} must lie in [0, 1]")
        if not self.max_seconds >= 0:   # NaN fails too
            raise ValueError(f"train.max_seconds={self.max_seconds} must be >= 0")
        if self.context not in CONTEXT_CONDITIONS:
            raise ValueError(f"train.context={self.context!r}: one of {list(CONTEXT_CONDITIONS)}")
        self.stop_rule()   # refuses a bad rule before anything is built

    def stop_rule(self) -> StopRule:
        """When the run stops (stopping.py): dev ``stop_metric``, ``patience``, ``min_delta``,
        ``max_steps``."""
        try:
            metric = StopMetric(self.stop_metric)
        except ValueError:
            raise ValueError(f"train.stop_metric={self.stop_metric!r}: one of "
                             f"{[m.value for m in StopMetric]}") from None
        return StopRule(metric, self.patience, self.min_delta, self.max_steps)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown train config keys: {sorted(unknown)}")
        d = dict(d)
        if "freeze" in d:
            d["freeze"] = tuple(d["freeze"] or ())
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["freeze"] = list(self.freeze)
        return d


def matched_budget(tcfg: TrainConfig, manifest: str | Path, share: float = 1.0) -> TrainConfig:
    """A matched control's settings: the updates the job of ``manifest`` trained
    (``counts.steps`` of its finished run) times ``share`` (its translation share), within its
    cap, with the stop rule off.

    WHY at the start of the run and not in the plan: the job stopped on its own dev plateau, so
    its updates are known only once it has finished (the rule declares its manifest an input,
    so the control runs after it). The settings returned are the run's own, recorded in its
    checkpoints and manifest, so the report shows the fixed budget the control trained."""
    path = Path(manifest)
    try:
        steps = int(json.loads(path.read_text())["counts"]["steps"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: no counts.steps of a finished run to match ({e})") from None
    updates = max(1, round(steps * share))
    if updates > tcfg.max_steps:
        raise ValueError(f"{path}: {steps} updates x {share} = {updates} exceed the control's "
                         f"cap max_steps={tcfg.max_steps}")
    return replace(tcfg, max_steps=updates, patience=0, matched_to=str(path))


#: Train keys that may change between a run and its resumption (a longer run, other logging).
RESUMABLE_CHANGES = frozenset({"max_steps", "max_seconds", "validate_every", "save_every", "log_every",
                               "keep_last", "average_last_k", "patience", "min_delta",
                               "dev_bleu", "device", "compile", "num_workers", "pad_multiple",
                               "phase_times"})


def run_record(tcfg: TrainConfig, model: str,
               inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """The train config as saved in checkpoints, with the hash of the code that decides what a
    training step of registry model ``model`` computes (the trainer and the module that defines
    the model, not the other models' modules) and the checksums of the inputs (role -> sha256):
    what makes a run the same run (resume.py)."""
    from pipeline_lib.models.registry import MODELS

    module = MODELS[model].__module__.split(".", 1)
    own = [module[1]] if module[0] == "pipeline_lib" else []   # a test's model has none here
    return {**tcfg.to_dict(), "code_hash": code_hash("training.train", *own),
            "inputs": dict(inputs or {})}
