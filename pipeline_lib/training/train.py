"""Training loop: sentence-level pre-training and the hooks for two-step document-level training.

``python -m pipeline_lib.training.train --config-json JSON --shards DIR --dev-shards DIR --spm MODEL
--out-dir DIR [--aux-shards DIR]``. JSON is ``{"model": {ModelConfig fields}, "train":
{TrainConfig fields}}``; ``model.vocab_size`` defaults to the sentencepiece vocabulary size.

The loader builds what the model's ``inputs()`` declare (pipeline_lib/models/inputs.py): sentence
pairs, pairs with a context from their document, document streams, or tagged sentence batches
from ``--shards`` plus document-level batches from ``--aux-shards`` (restoration instances in
pre-training, parallel documents in fine-tuning) on a share ``train.aux_ratio`` of the updates,
in the order of the model's ``schedule``. ``train.freeze`` may contain ``@sentence_level``: the
model's ``sentence_level_prefixes()`` (two-step training).

Output layout (``--out-dir`` = ``results/train_model/{model}``): ``checkpoints/{last,best,
best-kept,step-N,averaged,final}/`` (see checkpoint.py; ``final`` is what later stages evaluate:
the average of the last k checkpoints when ``average_last_k`` > 1, else ``best``; ``best-kept``
is ``best`` under a name that is no output of the rule, hard-linked, see below),
``metrics.jsonl``, ``tb/`` (TensorBoard), ``manifest.json``.

Pre-emption: SIGTERM / SIGUSR1 (what SLURM sends before a time limit or pre-emption) set a flag;
after the current update the run saves ``last`` and exits with ``EXIT_REQUEUE`` (143), which
Snakemake's ``retries`` (or ``scontrol requeue``) turns into a restart that resumes from
``last``. A SIGKILL loses at most the updates since the last ``save_every`` checkpoint.
Snakemake deletes the rule's outputs (``best``, ``final``, the manifest) before a retry; the best
dev value and its step are in ``last``'s trainer state and the best weights in ``best-kept``
(its ``config.yaml`` train record names their ``best_step``), from which a resumed run
re-creates ``best``, so it ends on the checkpoint an uninterrupted run ends on. Temporary
folders of a save killed midway (``checkpoints/.<name>.tmp-<pid>``) are removed at the start.
A start resumes only an unfinished run of the same configuration, code and inputs; a finished
one (``--forcerun``) is trained again from scratch (resume.py); ``attempts.json`` and the
manifest keep every attempt's time.
Multi-GPU: ``torchrun --nproc-per-node N -m pipeline_lib.training.train ...`` (NCCL on CUDA,
gloo on CPU).

The loop reads in one screen: :class:`Trainer` sets up (model, optimiser, data), resumes, runs
:meth:`Trainer.step` until the stop rule ends it (stopping.py: a plateau of the dev metric, or
``max_steps``), validating and saving on schedule, and finishes; the manifest says why it
stopped (``stop``) and what besides code, config and data decided its weights (``determinism``,
reproducibility.py).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from pipeline_lib.batch import Batch
from pipeline_lib.codehash import code_hash
from pipeline_lib.batch import DataMode
from pipeline_lib.layout import (ATTEMPTS_FILE, CHECKPOINT_DIR, CKPT_LAST, MANIFEST_FILE,
                                 METRICS_FILE)
from pipeline_lib.manifest import Manifest
from pipeline_lib.models.inputs import Phase, inputs_for
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.data import DataPosition, LoaderConfig, dev_batches
from pipeline_lib.training.distributed import (all_reduce, all_reduce_float, barrier,
                                               init_distributed)
from pipeline_lib.training.validation import dev_bleu, dev_loss
from pipeline_lib.training.metrics import TB_DIR, MetricsLog, Window
from pipeline_lib.training.phases import PhaseClock
from pipeline_lib.training.run_checkpoints import RunCheckpoints
from pipeline_lib.training.streams import Streams
from pipeline_lib.training.update import SUPERVISION, Updater
from pipeline_lib.training.resume import (FINISHED, SIGNAL_END, AttemptLog, attempt_identity,
                                          clear_run, decide, run_changes)
from pipeline_lib.training.reproducibility import determinants
from pipeline_lib.training.stopping import StopMetric, StopReason, StopRule, judge

SENTENCE_LEVEL = "@sentence_level"   # train.freeze token: the model's sentence_level_prefixes()
EXIT_REQUEUE = 143  # 128 + SIGTERM: "saved, please restart me"


@dataclass(frozen=True)
class TrainConfig:
    """The ``train:`` section of config.yaml (the schema describes each key; defaults agree with
    it and fit the CPU default run, config.yaml's comment gives the papers' values)."""

    max_tokens: int = 4096
    max_context_tokens: int | None = None
    update_freq: int = 1
    max_steps: int = 500
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

    def __post_init__(self) -> None:
        if not 0.0 <= self.aux_ratio <= 1.0:
            raise ValueError(f"train.aux_ratio={self.aux_ratio} must lie in [0, 1]")
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



# ----------------------------------------------------------------------------- model set-up


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


#: Train keys that may change between a run and its resumption (a longer run, other logging).
RESUMABLE_CHANGES = frozenset({"max_steps", "validate_every", "save_every", "log_every",
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


#: What an earlier run left in the job's folder; a run from scratch deletes it (resume.clear_run).
RUN_FILES = (CHECKPOINT_DIR, METRICS_FILE, TB_DIR, ATTEMPTS_FILE, MANIFEST_FILE)


class StopFlag:
    """Set by SIGTERM/SIGUSR1; checked between updates so a save never races an update."""

    def __init__(self) -> None:
        self.signum = 0
        for s in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(s, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum


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
    #: the run ended (max_steps or early stop): a later start trains from scratch (resume.py)
    finished: bool = False
    aux_position: DataPosition = field(default_factory=DataPosition)
    #: parse supervision seen (models with ``inputs.heads``): tokens with a gold head / tokens
    supervision: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SUPERVISION, 0))

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "position": self.position.to_dict(),
                "aux_position": self.aux_position.to_dict(), "best_dev": self.best_dev,
                "best_step": self.best_step, "bad_evals": self.bad_evals,
                "reference": self.reference, "tokens": self.tokens,
                "supervision": dict(self.supervision), "finished": self.finished}

    @classmethod
    def from_dict(cls, ts: dict[str, Any]) -> "TrainerState":
        return cls(step=ts["step"], position=DataPosition.from_dict(ts["position"]),
                   best_dev=ts["best_dev"], best_step=ts.get("best_step"),
                   bad_evals=ts["bad_evals"], reference=ts.get("reference", ts["best_dev"]),
                   tokens=ts["tokens"],
                   aux_position=DataPosition.from_dict(ts.get("aux_position",
                                                              {"epoch": 0, "batches": 0})),
                   supervision={**dict.fromkeys(SUPERVISION, 0), **ts.get("supervision", {})},
                   finished=ts.get("finished", False))


def _model_config(d: dict[str, Any], spm_path: str | Path):
    from pipeline_lib.models.config import ModelConfig

    d = dict(d)
    if not d.get("vocab_size"):
        import sentencepiece as spm

        d["vocab_size"] = spm.SentencePieceProcessor(model_file=str(spm_path)).get_piece_size()
    return ModelConfig.from_dict(d)


class Trainer:
    """One training run: :meth:`run` = resume, then :meth:`step` until done, :meth:`validate`
    and :meth:`save` on schedule, :meth:`finish`."""

    def __init__(self, model_dict: dict[str, Any], tcfg: TrainConfig, shards: str | Path,
                 dev_shards: str | Path, spm_path: str | Path, out_dir: str | Path,
                 aux_shards: str | Path | None = None, attempt: int = 1) -> None:
        from pipeline_lib.models.registry import build_model

        if tcfg.aux_ratio > 0 and aux_shards is None:
            raise ValueError(f"train.aux_ratio={tcfg.aux_ratio} needs --aux-shards")
        self.tcfg, self.spm_path, self.out_dir = tcfg, spm_path, Path(out_dir)
        self.info, self.device = init_distributed(tcfg.device)
        random.seed(tcfg.seed)
        np.random.seed(tcfg.seed)
        torch.manual_seed(tcfg.seed)
        self.stop = StopFlag()
        self.manifest = Manifest(stage="train_model", params={"train": tcfg.to_dict(),
                                                              "model": model_dict})
        roles = {"shards": shards, "dev_shards": dev_shards, "spm": spm_path,
                 "aux_shards": aux_shards, "init_from": tcfg.init_from}
        if self.info.is_main:   # the main process saves checkpoints and decides on resuming
            for p in roles.values():
                if p is not None:
                    self.manifest.add_input(p)
        self.mcfg = _model_config(model_dict, spm_path)
        self.record = run_record(tcfg, self.mcfg.name,
                                 {role: self.manifest.inputs[str(p)] for role, p in
                                  roles.items() if str(p) in self.manifest.inputs})
        self.ckpts = RunCheckpoints(self.out_dir, self.mcfg.to_dict(), self.record, spm_path,
                                    self._log)
        self.model = build_model(self.mcfg).to(self.device)
        self.inputs = inputs_for(self.model, spm_path)
        self.rule = tcfg.stop_rule()
        if self.rule.metric is StopMetric.BLEU and (not tcfg.dev_bleu or self.inputs.dev_bleu_skip):
            raise ValueError(f"train.stop_metric=bleu needs dev BLEU, which this run does not "
                             f"compute ({self.inputs.dev_bleu_skip or 'train.dev_bleu: false'}): "
                             "use loss or nll")
        self.state = TrainerState(best_dev=self.rule.worst, reference=self.rule.worst)
        self.attempts = AttemptLog(self.out_dir, self.info.is_main)
        self.last, self.last_state = self._start(attempt)
        self.init_keys = None
        if tcfg.init_from and self.last is None:
            self.init_keys = init_from_checkpoint(self.model, tcfg.init_from)
            self._log(f"init_from {tcfg.init_from}: missing={self.init_keys['missing']} "
                      f"unexpected={self.init_keys['unexpected']}")
        self.frozen = apply_freeze(self.model, tcfg.freeze)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self._data(shards, dev_shards, aux_shards)
        self.phases = PhaseClock(self.device, tcfg.phase_times)
        self.updater = Updater(self.model, self.trainable, tcfg, self.info, self.device,
                               self.inputs, self.phases, unused_parameters=(
                                   self.streams.aux is not None
                                   or self.inputs.mode is DataMode.DOCUMENT))
        self.compiled = self.updater.compiled

    def _log(self, message: str) -> None:
        if self.info.is_main:
            print(message, file=sys.stderr, flush=True)

    def _start(self, attempt: int) -> tuple[Path | None, dict[str, Any] | None]:
        """``checkpoints/last`` (and, on the main process, its trainer state) when this start
        continues its run; else the earlier run's files are deleted (resume.decide says when).
        The main process decides, the others follow."""
        state, resume = None, 0.0
        if self.info.is_main:
            self.ckpts.sweep()
            last = self.ckpts.last()
            changes = [] if last is None else run_changes(
                ckpt.read_config(last), self.mcfg.to_dict(), self.record, RESUMABLE_CHANGES)
            if last is not None and not changes:
                state = ckpt.load_trainer_state(last)
            step = state["step"] if state else 0
            decision = decide(last, changes, bool(state and state.get("finished")), step)
            self._log(f"attempt {attempt}: {decision.reason}")
            if not decision.resume:
                clear_run(self.out_dir, RUN_FILES)
                state, step = None, 0
            self.attempts.start(attempt_identity(attempt, os.environ), step, decision.resume)
            resume = float(decision.resume)
        resumed = all_reduce_float(resume, self.info, "max") > 0
        barrier(self.info)   # the main process has cleared an earlier run
        return (self.ckpts.last(), state) if resumed else (None, None)

    def _data(self, shards, dev_shards, aux_shards) -> None:
        """The data streams (streams.py) and the dev batches, as the model's inputs say."""
        tcfg, info, cuda = self.tcfg, self.info, self.device.type == "cuda"
        # Lengths rounded up to a multiple of 8 on CUDA: fewer distinct shapes (first-sight costs,
        # compiled graphs); on a CPU the extra padding is only extra work.
        pad = tcfg.pad_multiple or (8 if cuda else 1)
        lcfg = LoaderConfig(max_tokens=tcfg.max_tokens, max_context_tokens=tcfg.max_context_tokens,
                            seed=tcfg.seed,
                            buffer_sents=tcfg.buffer_sents, max_len=self.mcfg.max_len,
                            num_workers=tcfg.num_workers, inputs=self.inputs,
                            pin_memory=cuda, pad_multiple=pad)
        self.streams = Streams(shards, aux_shards, lcfg, self.inputs, info, tcfg.aux_ratio)
        self.dev = (dev_batches(dev_shards, tcfg.max_tokens, self.mcfg.max_len, self.inputs,
                                tcfg.seed, tcfg.max_context_tokens, pad) if info.is_main else [])
        if tcfg.dev_bleu and self.inputs.dev_bleu_skip:
            self._log(f"dev BLEU skipped: {self.inputs.dev_bleu_skip}")

    # --- resume -----------------------------------------------------------------------------
    def resume(self) -> None:
        """Weights, optimiser, schedule, RNG and data position of ``checkpoints/last``."""
        if self.last is None:
            return
        self.model.load_state_dict(ckpt.load_state(self.last, self.device))
        ts = self.last_state or ckpt.load_trainer_state(self.last)
        self.last_state = None
        self.updater.optimizer.load_state_dict(ts["optimizer"])
        self.updater.scheduler.load_state_dict(ts["scheduler"])
        self.state = TrainerState.from_dict(ts)
        self._restore_best()
        ckpt.set_rng_state(ts["rng"][min(self.info.rank, len(ts["rng"]) - 1)])
        self._log(f"resumed from {self.last} at step {self.state.step}, data {self.state.position}")

    def _restore_best(self) -> None:
        """``checkpoints/best`` again from ``best-kept`` (Snakemake deleted it before this retry),
        so the run keeps its best over all attempts. Only when ``best-kept`` holds the state's
        ``best_step`` (a SIGKILL after a new best and before the next save leaves a newer one);
        otherwise the best value is forgotten and the next validation chooses ``best`` anew."""
        st = self.state
        if self.info.is_main and st.best_step is not None and \
                not self.ckpts.restore_best(st.best_step):
            st.best_dev, st.best_step = self.rule.worst, None

    # --- one update -------------------------------------------------------------------------
    def next_batch(self, aux: bool) -> Batch:
        """Next micro-batch of the main (or aux) stream (streams.py); a method of its own so
        bench/trainer_efficiency.py can record what the trainer draws."""
        return self.streams.next_batch(aux, self.state)

    def step(self, window: Window) -> None:
        """One optimiser update (update.py) on the stream the model's schedule picks."""
        aux = (self.streams.aux is not None
               and self.inputs.schedule(self.state.step, self.tcfg.aux_ratio) is Phase.DOCUMENT)
        tokens, supervision = self.updater.update(self.state.step, aux, self.next_batch, window)
        if supervision is not None:
            self.pending_supervision = self.pending_supervision + supervision
        self.state.step += 1
        self.pending_tokens = self.pending_tokens + tokens

    # --- validation and checkpoints ---------------------------------------------------------
    def validate(self) -> None:
        """Dev loss/NLL/BLEU; ``checkpoints/best`` and the patience counter by the stop rule
        (stopping.judge). Every rank learns the counter, so all stop at the same update."""
        bad_evals = 0.0
        if self.info.is_main:
            m = dev_loss(self.model, self.dev, self.tcfg.label_smoothing, self.device,
                         other_source=self.inputs.mode is DataMode.SENTENCE)
            if self.tcfg.dev_bleu and not self.inputs.dev_bleu_skip:
                bleu = dev_bleu(self.model, self.dev, self.spm_path, self.device, self.inputs)
                m["bleu"], m["bleu_len_ratio"] = bleu["bleu"], bleu["len_ratio"]
            self.log.write({"step": self.state.step, "split": "dev", **m})
            value, st = m[self.rule.metric.value], self.state
            v = judge(self.rule, value, st.best_dev, st.reference, st.bad_evals)
            if v.new_best:
                st.best_dev, st.best_step = value, st.step
                self.ckpts.keep_best(self.model.state_dict(), st.step, value)
            if v.gained:
                st.reference = value
            bad_evals = float(v.bad_evals)
        self.state.bad_evals = int(all_reduce_float(bad_evals, self.info, "max"))

    def save(self, name: str) -> None:
        """Save a resumable checkpoint (weights + trainer state) under ``name``; every rank
        contributes its RNG state."""
        import torch.distributed as dist

        self.state.tokens += int(self.pending_tokens)   # settle the counts before they are saved
        self.pending_tokens = torch.zeros((), device=self.device)
        seen = all_reduce(self.pending_supervision, self.info).tolist()
        for key, n in zip(SUPERVISION, seen):
            self.state.supervision[key] += int(n)
        self.pending_supervision = torch.zeros(len(SUPERVISION), dtype=torch.long,
                                               device=self.device)
        rngs = [ckpt.rng_state()]
        if self.info.world_size > 1:
            rngs = [None] * self.info.world_size
            dist.all_gather_object(rngs, ckpt.rng_state())
        if self.info.is_main:
            ts = {"optimizer": self.updater.optimizer.state_dict(),
                  "scheduler": self.updater.scheduler.state_dict(),
                  "rng": rngs, **self.state.to_dict()}
            self.ckpts.write(name, self.model.state_dict(), ts)
            self.attempts.update(self.state.step)
        barrier(self.info)

    def save_step(self) -> None:
        """``step-N``, copied to ``last``; only the newest ``keep_last`` (or k averaged) kept."""
        self.save(f"step-{self.state.step}")
        if self.info.is_main:
            self.ckpts.rotate(self.state.step, max(self.tcfg.keep_last, self.tcfg.average_last_k))

    def log_train(self, window: Window, seconds: float) -> None:
        """One train record from the window: the loss summed over ranks, then every sum
        fetched in one transfer (the one device synchronisation of ``log_every`` updates)."""
        if "loss" in window.sums:   # every rank joins the reduction
            window.sums["loss"] = all_reduce(window.sums["loss"], self.info)
        if not self.info.is_main:
            return
        totals = window.totals()
        tokens = totals["tokens"]
        rec = {"step": self.state.step, "split": "train", "loss": totals["loss"] / max(tokens, 1.0),
               "tokens_per_s": tokens / max(seconds, 1e-9),
               "lr": self.updater.scheduler.get_last_lr()[0], "epoch": self.state.position.epoch,
               **({"phase_s": self.phases.take()} if self.phases.enabled else {}),
               **({"compiled_graphs": self.compiled.graphs} if self.compiled else {}),
               **{k: v / window.counts[k] for k, v in totals.items() if k not in ("loss", "tokens")}}
        self.log.write(rec)
        self.bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")

    # --- the loop ---------------------------------------------------------------------------
    def run(self) -> int:
        """Train (or resume) to ``max_steps``; returns the exit code (0, or EXIT_REQUEUE)."""
        tcfg = self.tcfg
        self.resume()
        self.log = MetricsLog(self.out_dir, self.state.step, self.info.is_main)
        self.streams.start(self.state)
        self.pending_tokens = torch.zeros((), device=self.device)
        self.pending_supervision = torch.zeros(len(SUPERVISION), dtype=torch.long,
                                               device=self.device)
        self.model.train()
        self.bar = tqdm(total=tcfg.max_steps, initial=self.state.step, disable=not self.info.is_main,
                        mininterval=1.0 if sys.stderr.isatty() else 30.0, desc="train",
                        dynamic_ncols=True)
        exit_code, last_val = 0, -1
        window, t0 = Window(), time.time()
        # a resumed run that had already reached its plateau trains no further
        while self.state.step < tcfg.max_steps and not self.rule.plateaued(self.state.bad_evals):
            self.step(window)
            with self.phases.phase("log"):
                self.bar.update(1)
                if self.state.step % tcfg.log_every == 0 or self.state.step == tcfg.max_steps:
                    self.log_train(window, time.time() - t0)
                    window, t0 = Window(), time.time()
            t_pause = time.time()
            if self.state.step % tcfg.validate_every == 0:
                self.validate()
                last_val = self.state.step
            if self.state.step % tcfg.save_every == 0:
                self.save_step()
            signalled = all_reduce_float(float(self.stop.signum), self.info, "max")
            if signalled:
                self.save(CKPT_LAST)
                self.attempts.update(self.state.step, end=f"{SIGNAL_END}{int(signalled)}")
                exit_code = EXIT_REQUEUE
                self._log(f"signal {int(signalled)}: saved last at step {self.state.step}, "
                          f"exiting {EXIT_REQUEUE} for requeue")
                break
            t0 += time.time() - t_pause  # tokens/s counts training time only
        self.bar.close()
        self.streams.close()
        if exit_code == 0:
            reason = (StopReason.PLATEAU if self.rule.plateaued(self.state.bad_evals)
                      else StopReason.MAX_STEPS)
            if reason is StopReason.PLATEAU:
                self._log(f"stopped on a plateau at step {self.state.step}: dev "
                          f"{self.rule.metric.value} did not improve by more than "
                          f"{self.rule.min_delta} in {self.rule.patience} validations")
            self.finish(reason, validated=last_val == self.state.step)
        self.log.close()
        if self.info.world_size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()
        return exit_code

    def finish(self, reason: StopReason, validated: bool) -> None:
        """Final validation, ``last``, the averaged checkpoint and the manifest (with why the
        run stopped and what decides its weights besides code, config and data)."""
        if not validated:
            self.validate()
        self.state.finished = True
        self.save(CKPT_LAST)
        if not self.info.is_main:
            return
        # `final`: the weights every later stage evaluates (one name, whatever the recipe)
        self.ckpts.finalize(self.tcfg.average_last_k, self.tcfg.save_every, self.state.step)
        self.manifest.counts = {"steps": self.state.step, "target_tokens": self.state.tokens,
                                "target_tokens_per_update": (self.state.tokens
                                                             / max(self.state.step, 1)),
                                "epochs_started": self.state.position.epoch + 1,
                                "parameters": sum(p.numel() for p in self.model.parameters()),
                                "trainable_parameters": sum(p.numel() for p in self.trainable),
                                "frozen_parameters": len(self.frozen)}
        st = self.state
        self.manifest.extra = {"best_dev_loss": (st.best_dev if self.rule.metric is StopMetric.LOSS
                                                 else None),
                               "init_from": self.init_keys,
                               "data_mode": self.inputs.mode.value,
                               "dev_bleu_skipped": self.inputs.dev_bleu_skip,
                               "aux_position": st.aux_position.to_dict(),
                               "world_size": self.info.world_size, "device": str(self.device),
                               "stop": {"reason": reason.value, "updates": st.step,
                                        "rule": self.rule.to_dict(), "best": st.best_dev,
                                        "best_step": st.best_step,
                                        "validations_without_gain": st.bad_evals,
                                        "interruptions": self.attempts.interruptions()},
                               "determinism": determinants(self.tcfg.seed, self.tcfg.num_workers,
                                                           self.info.world_size, self.device),
                               "phase_s": self.phases.totals(),
                               "compiled_graphs": self.compiled.graphs if self.compiled else None}
        self.attempts.update(self.state.step, end=FINISHED)
        self.manifest.extra.update(self.attempts.summary())
        if self.inputs.heads:   # the share of training tokens that carried parse supervision
            sup = self.state.supervision
            self.manifest.counts["supervision"] = {
                **sup, "src_share": sup["src_heads"] / max(sup["src_tokens"], 1),
                "tgt_share": sup["tgt_heads"] / max(sup["tgt_tokens"], 1)}
        self.manifest.write(self.out_dir / MANIFEST_FILE)


def train(model_dict: dict[str, Any], tcfg: TrainConfig, shards: str | Path, dev_shards: str | Path,
          spm_path: str | Path, out_dir: str | Path, aux_shards: str | Path | None = None,
          attempt: int = 1) -> int:
    """Run (or resume) training; returns the process exit code (0, or EXIT_REQUEUE)."""
    return Trainer(model_dict, tcfg, shards, dev_shards, spm_path, out_dir, aux_shards,
                   attempt).run()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-json", required=True,
                    help='{"model": {ModelConfig fields}, "train": {TrainConfig fields}}')
    ap.add_argument("--shards", required=True, help="directory of training shard-*.parquet")
    ap.add_argument("--dev-shards", required=True, help="directory of dev shard-*.parquet")
    ap.add_argument("--spm", required=True, help="sentencepiece model (copied into checkpoints)")
    ap.add_argument("--out-dir", required=True, help="results/train_model/{model}")
    ap.add_argument("--aux-shards", help="directory of the document-level shard-*.parquet drawn on "
                    "a share train.aux_ratio of the updates (restore/ or doc/ shards)")
    ap.add_argument("--attempt", type=int, default=1,
                    help="Snakemake's attempt (rule train_model passes it through the launcher); "
                         "recorded with the attempt's time in attempts.json and the manifest")
    a = ap.parse_args(argv)
    cfg = json.loads(a.config_json)
    return train(cfg["model"], TrainConfig.from_dict(cfg.get("train", {})), a.shards,
                 a.dev_shards, a.spm, a.out_dir, a.aux_shards, a.attempt)


if __name__ == "__main__":
    sys.exit(main())
