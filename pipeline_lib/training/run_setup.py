"""What a training run is set up with before its first update: the model config, whether this
start continues ``checkpoints/last`` or trains from scratch (and, if it continues, the state it
goes on from), and the data streams.

WHY apart from the loop (train.py): each is decided once per start, from files and config, and
each has its own reason to change (the resume rule, the loader), while the loop's reason is
the order of updates, validations and saves.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pipeline_lib import checkpoint as ckpt
from pipeline_lib.layout import ATTEMPTS_FILE, CHECKPOINT_DIR, MANIFEST_FILE, METRICS_FILE
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.inputs import ModelInputs
from pipeline_lib.training.data import LoaderConfig, dev_batches
from pipeline_lib.training.distributed import DistInfo, all_reduce_float, barrier
from pipeline_lib.training.metrics import TB_DIR
from pipeline_lib.training.resume import (AttemptLog, attempt_identity, clear_run, decide,
                                          run_changes)
from pipeline_lib.training.run_checkpoints import RunCheckpoints
from pipeline_lib.training.state import TrainerState
from pipeline_lib.training.stopping import StopRule
from pipeline_lib.training.streams import Streams
from pipeline_lib.training.train_config import TrainConfig
from pipeline_lib.training.update import Updater

#: What an earlier run left in the job's folder; a run from scratch deletes it (resume.clear_run).
RUN_FILES = (CHECKPOINT_DIR, METRICS_FILE, TB_DIR, ATTEMPTS_FILE, MANIFEST_FILE)


def model_config(d: dict[str, Any], spm_path: str | Path) -> ModelConfig:
    """The job's model config; ``vocab_size`` from the sentencepiece model unless given (the
    rule does not know it before BPE has run)."""
    d = dict(d)
    if not d.get("vocab_size"):
        import sentencepiece as spm

        d["vocab_size"] = spm.SentencePieceProcessor(model_file=str(spm_path)).get_piece_size()
    return ModelConfig.from_dict(d)


def start_attempt(ckpts: RunCheckpoints, model: dict[str, Any], record: dict[str, Any],
                  resumable: frozenset[str], attempts: AttemptLog, info: DistInfo, attempt: int,
                  out_dir: Path, log: Callable[[str], None]
                  ) -> tuple[Path | None, dict[str, Any] | None]:
    """``checkpoints/last`` (and, on the main process, its trainer state) when this start
    continues its run (``resumable``: the train keys a resume may change); else the earlier
    run's files are deleted (resume.decide says when). The main process decides, the others
    follow."""
    state, resume = None, 0.0
    if info.is_main:
        ckpts.sweep()
        last = ckpts.intact_last()
        changes = [] if last is None else run_changes(
            ckpt.read_config(last), model, record, resumable)
        if last is not None and not changes:
            state = ckpt.load_trainer_state(last)
        step = state["step"] if state else 0
        decision = decide(last, changes, bool(state and state.get("finished")), step, attempt)
        log(f"attempt {attempt}: {decision.reason}")
        if not decision.resume:
            clear_run(out_dir, RUN_FILES)
            state, step = None, 0
        attempts.start(attempt_identity(attempt, os.environ), step, decision.resume)
        resume = float(decision.resume)
    resumed = all_reduce_float(resume, info, "max") > 0
    barrier(info)   # the main process has cleared an earlier run
    return (ckpts.last(), state) if resumed else (None, None)


def open_data(tcfg: TrainConfig, max_len: int, inputs: ModelInputs, info: DistInfo, device: torch.device,
              shards: str | Path, dev_shards: str | Path, aux_shards: str | Path | None,
              log: Callable[[str], None]) -> tuple[Streams, list]:
    """The data streams (streams.py) and the dev batches (main process), as the model's inputs
    say."""
    cuda = device.type == "cuda"
    # Lengths rounded up to a multiple of 8 on CUDA: fewer distinct shapes (first-sight costs,
    # compiled graphs); on a CPU the extra padding is only extra work.
    pad = tcfg.pad_multiple or (8 if cuda else 1)
    lcfg = LoaderConfig(max_tokens=tcfg.max_tokens, max_context_tokens=tcfg.max_context_tokens,
                        seed=tcfg.seed, buffer_sents=tcfg.buffer_sents, max_len=max_len,
                        num_workers=tcfg.num_workers, inputs=inputs, pin_memory=cuda,
                        pad_multiple=pad)
    streams = Streams(shards, aux_shards, lcfg, inputs, info, tcfg.aux_ratio)
    dev = (dev_batches(dev_shards, tcfg.max_tokens, max_len, inputs, tcfg.seed,
                       tcfg.max_context_tokens, pad) if info.is_main else [])
    if tcfg.dev_bleu and inputs.dev_bleu_skip:
        log(f"dev BLEU skipped: {inputs.dev_bleu_skip}")
    return streams, dev


def resume_run(last: Path, saved: dict[str, Any] | None, model: torch.nn.Module, updater: Updater,
               ckpts: RunCheckpoints, rule: StopRule, info: DistInfo, device: torch.device,
               log: Callable[[str], None]) -> TrainerState:
    """Weights, optimiser, schedule, RNG and data position of ``checkpoints/last`` (``saved``:
    its trainer state when the main process has read it already); the state to go on from.

    ``checkpoints/best`` is made again from ``best-kept`` (Snakemake deleted it before this
    retry), so the run keeps its best over all attempts. Only when ``best-kept`` holds the
    state's ``best_step`` (a SIGKILL after a new best and before the next save leaves a newer
    one); otherwise the best value is forgotten and the next validation chooses ``best`` anew."""
    model.load_state_dict(ckpt.load_state(last, device))
    ts = saved or ckpt.load_trainer_state(last)
    updater.optimizer.load_state_dict(ts["optimizer"])
    updater.scheduler.load_state_dict(ts["scheduler"])
    state = TrainerState.from_dict(ts)
    if info.is_main and state.best_step is not None and not ckpts.restore_best(state.best_step):
        state.best_dev, state.best_step = rule.worst, None
    ckpt.set_rng_state(ts["rng"][min(info.rank, len(ts["rng"]) - 1)])
    log(f"resumed from {last} at step {state.step}, data {state.position}")
    return state
