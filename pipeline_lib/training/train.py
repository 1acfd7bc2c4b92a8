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
Snakemake's ``retries`` (or SLURM's requeue) turns into a restart that resumes from ``last``.
At a SLURM time limit's warning (``--max-requeues``) the main rank first requeues its own job
(time_limit.py), so the time limit costs no retry. A SIGKILL loses at most the updates since
the last ``save_every`` checkpoint.
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

The loop reads in one screen: :class:`Trainer` sets up (model, optimiser, data: run_setup.py),
resumes (run_setup.resume_run, state.py), runs
:meth:`Trainer.step` until the stop rule ends it (stopping.py: a plateau of the dev metric, or
``max_steps``), validating and saving on schedule, and finishes; the manifest says why it
stopped (``stop``) and what besides code, config and data decided its weights (``determinism``,
reproducibility.py; run_summary.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.layout import (CKPT_LAST, MANIFEST_FILE)
from pipeline_lib.manifest import Manifest
from pipeline_lib.models.inputs import Phase, inputs_for, with_context
from pipeline_lib.progress import progress_interval
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.data import STOP_SIGNALS
from pipeline_lib.training.shards import DamagedShard
from pipeline_lib.training.distributed import (all_reduce, all_reduce_float, barrier,
                                               init_distributed)
from pipeline_lib.training.validation import dev_bleu, dev_loss
from pipeline_lib.training.metrics import MetricsLog, Window
from pipeline_lib.training.phases import PhaseClock
from pipeline_lib.training.run_checkpoints import RunCheckpoints
from pipeline_lib.training.run_setup import model_config, open_data, resume_run, start_attempt
from pipeline_lib.training.state import TrainerState
from pipeline_lib.training.train_config import (RESUMABLE_CHANGES, TrainConfig, matched_budget,
                                                run_record)
from pipeline_lib.training.two_step import apply_freeze, init_from_checkpoint
from pipeline_lib.training.run_summary import summarise
from pipeline_lib.training.update import Tally, Updater
from pipeline_lib.training.reproducibility import seed_all
from pipeline_lib.training.resume import (FINISHED, SIGNAL_END, AttemptLog)
from pipeline_lib.training.stopping import StopMetric, StopReason, judge
from pipeline_lib.training.time_limit import RequeuePolicy, after_save
from pipeline_lib.atomic import exits_on_full_disk

EXIT_REQUEUE = 143  # 128 + SIGTERM: "saved, please restart me"


class StopFlag:
    """Set by SIGTERM/SIGUSR1; checked between updates so a save never races an update."""

    def __init__(self) -> None:
        self.signum = 0
        for s in STOP_SIGNALS:
            signal.signal(s, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum


class Trainer:
    """One training run: :meth:`run` = resume, then :meth:`step` until done, :meth:`validate`
    and :meth:`save` on schedule, :meth:`finish`."""

    def __init__(self, model_dict: dict[str, Any], tcfg: TrainConfig, shards: str | Path,
                 dev_shards: str | Path, spm_path: str | Path, out_dir: str | Path,
                 aux_shards: str | Path | None = None, attempt: int = 1,
                 requeue: RequeuePolicy | None = None, pretokenize: dict | None = None) -> None:
        from pipeline_lib.models.registry import build_model

        if tcfg.aux_ratio > 0 and aux_shards is None:
            raise ValueError(f"train.aux_ratio={tcfg.aux_ratio} needs --aux-shards")
        self.tcfg, self.spm_path, self.out_dir = tcfg, spm_path, Path(out_dir)
        self.requeue = requeue
        self.info, self.device = init_distributed(tcfg.device)
        seed_all(tcfg.seed)
        self.stop = StopFlag()
        self.manifest = Manifest(stage="train_model", params={"train": tcfg.to_dict(),
                                                              "model": model_dict})
        roles = {"shards": shards, "dev_shards": dev_shards, "spm": spm_path,
                 "aux_shards": aux_shards, "init_from": tcfg.init_from}
        if self.info.is_main:   # the main process saves checkpoints and decides on resuming
            for p in roles.values():
                if p is not None:
                    self.manifest.add_input(p)
        self.mcfg = model_config(model_dict, spm_path)
        self.record = run_record(tcfg, self.mcfg.name,
                                 {role: self.manifest.inputs[str(p)] for role, p in
                                  roles.items() if str(p) in self.manifest.inputs})
        # a model of pre-tokenized text carries its steps and truecasers (translate applies them)
        truecasers = {ckpt.truecaser_file(lang): path
                      for lang, path in (pretokenize or {}).get("truecasers", {}).items()}
        if pretokenize:
            self.record["pretokenize"] = {k: pretokenize[k] for k in ("langs", "tokenize")}
        self.ckpts = RunCheckpoints(self.out_dir, self.mcfg.to_dict(), self.record, spm_path,
                                    self._log, truecasers)
        self.model = build_model(self.mcfg).to(self.device)
        self.inputs = with_context(inputs_for(self.model, spm_path), tcfg.context, self.mcfg.name)
        self.rule = tcfg.stop_rule()
        if self.rule.metric is StopMetric.BLEU and (not tcfg.dev_bleu or self.inputs.dev_bleu_skip):
            raise ValueError(f"train.stop_metric=bleu needs dev BLEU, which this run does not "
                             f"compute ({self.inputs.dev_bleu_skip or 'train.dev_bleu: false'}): "
                             "use loss or nll")
        self.state = TrainerState(best_dev=self.rule.worst, reference=self.rule.worst)
        self.attempts = AttemptLog(self.out_dir, self.info.is_main)
        self.last, self.last_state = start_attempt(
            self.ckpts, self.mcfg.to_dict(), self.record, RESUMABLE_CHANGES, self.attempts,
            self.info, attempt, self.out_dir, self._log)
        self.init_keys = None
        if tcfg.init_from and self.last is None:
            self.init_keys = init_from_checkpoint(self.model, tcfg.init_from)
            self._log(f"init_from {tcfg.init_from}: missing={self.init_keys['missing']} "
                      f"unexpected={self.init_keys['unexpected']}")
        self.frozen = apply_freeze(self.model, tcfg.freeze)
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.streams, self.dev = open_data(tcfg, self.mcfg.max_len, self.inputs, self.info,
                                           self.device, shards, dev_shards, aux_shards, self._log)
        self.phases = PhaseClock(self.device, tcfg.phase_times)
        self.updater = Updater(self.model, self.trainable, tcfg, self.info, self.device,
                               self.inputs, self.phases, unused_parameters=(
                                   self.streams.aux is not None
                                   or self.inputs.mode is DataMode.DOCUMENT))
        self.compiled = self.updater.compiled

    def _log(self, message: str) -> None:
        if self.info.is_main:
            print(message, file=sys.stderr, flush=True)

    # --- one update -------------------------------------------------------------------------
    def next_batch(self, aux: bool) -> Batch:
        """Next micro-batch of the main (or aux) stream (streams.py); a method of its own so
        bench/trainer_efficiency.py can record what the trainer draws."""
        return self.streams.next_batch(aux, self.state)

    def step(self, window: Window) -> None:
        """One optimiser update (update.py) on the stream the model's schedule picks."""
        aux = (self.streams.aux is not None
               and self.inputs.schedule(self.state.step, self.tcfg.aux_ratio) is Phase.DOCUMENT)
        self.tally.add(*self.updater.update(self.state.step, aux, self.next_batch, window))
        self.state.step += 1

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

        self.tally.settle(self.state, self.info)   # the counts go into the saved state
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
        if self.last is not None:
            self.state = resume_run(self.last, self.last_state, self.model, self.updater,
                                    self.ckpts, self.rule, self.info, self.device, self._log)
            self.last_state = None
        self.log = MetricsLog(self.out_dir, self.state.step, self.info.is_main)
        self.streams.start(self.state)
        self.tally = Tally(self.device)
        self.model.train()
        self.bar = tqdm(total=tcfg.max_steps, initial=self.state.step, disable=not self.info.is_main,
                        mininterval=progress_interval(), desc="train",
                        dynamic_ncols=True)
        exit_code, last_val, timed_out, start_step = 0, -1, False, self.state.step
        window, t0 = Window(), time.time()
        deadline = time.monotonic() + tcfg.max_seconds if tcfg.max_seconds else None
        refinish = self.state.finished   # a retry after the run finished (resume.decide)
        # a resumed run that had already reached its plateau trains no further
        while (not refinish and self.state.step < tcfg.max_steps
               and not self.rule.plateaued(self.state.bad_evals)):
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
                if self.requeue is not None and self.info.is_main:   # time-limit requeue
                    self._log(after_save(self.requeue, os.environ, self.state.step > start_step))
                break
            # every rank stops after the same update (the main rank's clock decides)
            if deadline is not None and all_reduce_float(
                    float(time.monotonic() >= deadline and self.info.is_main), self.info, "max"):
                timed_out = True
                self._log(f"train.max_seconds={tcfg.max_seconds:g} reached at step "
                          f"{self.state.step}: finishing")
                break
            t0 += time.time() - t_pause  # tokens/s counts training time only
        self.bar.close()
        self.streams.close()
        if exit_code == 0:
            reason = (StopReason(self.state.stop) if refinish and self.state.stop
                      else StopReason.PLATEAU if self.rule.plateaued(self.state.bad_evals)
                      else StopReason.MAX_SECONDS if timed_out else StopReason.MAX_STEPS)
            if reason is StopReason.PLATEAU and not refinish:
                self._log(f"stopped on a plateau at step {self.state.step}: dev "
                          f"{self.rule.metric.value} did not improve by more than "
                          f"{self.rule.min_delta} in {self.rule.patience} validations")
            self.finish(reason, validated=refinish or last_val == self.state.step)
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
        self.state.finished, self.state.stop = True, reason.value
        self.save(CKPT_LAST)
        if not self.info.is_main:
            return
        # `final`: the weights every later stage evaluates (one name, whatever the recipe)
        self.ckpts.finalize(self.tcfg.average_last_k, self.tcfg.save_every, self.state.step)
        summarise(self, reason)
        self.attempts.update(self.state.step, end=FINISHED)
        self.manifest.extra.update(self.attempts.summary())
        self.manifest.write(self.out_dir / MANIFEST_FILE)


def train(model_dict: dict[str, Any], tcfg: TrainConfig, shards: str | Path, dev_shards: str | Path,
          spm_path: str | Path, out_dir: str | Path, aux_shards: str | Path | None = None,
          attempt: int = 1, requeue: RequeuePolicy | None = None,
          pretokenize: dict | None = None) -> int:
    """Run (or resume) training; returns the process exit code (0, or EXIT_REQUEUE)."""
    trainer = Trainer(model_dict, tcfg, shards, dev_shards, spm_path, out_dir, aux_shards,
                      attempt, requeue, pretokenize)
    try:
        return trainer.run()
    finally:
        # also on an error: loader workers ignore SIGTERM, and a live loader at exit kept the
        # interpreter waiting for them for ever (a damaged shard hung the job instead of failing)
        trainer.streams.close()


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-json", required=True,
                    help='{"model": {ModelConfig fields}, "train": {TrainConfig fields}, '
                         '"pretokenize": {"langs": [src, tgt], "tokenize": {lang: steps}, '
                         '"truecasers": {lang: model}} where the text was pre-tokenized}')
    ap.add_argument("--shards", required=True, help="directory of training shard-*.parquet")
    ap.add_argument("--dev-shards", required=True, help="directory of dev shard-*.parquet")
    ap.add_argument("--spm", required=True, help="sentencepiece model (copied into checkpoints)")
    ap.add_argument("--out-dir", required=True, help="results/train_model/{model}")
    ap.add_argument("--aux-shards", help="directory of the document-level shard-*.parquet drawn on "
                    "a share train.aux_ratio of the updates (restore/ or doc/ shards)")
    ap.add_argument("--attempt", type=int, default=1,
                    help="Snakemake's attempt (rule train_model passes it through the launcher); "
                         "recorded with the attempt's time in attempts.json and the manifest")
    ap.add_argument("--max-requeues", type=int, default=None,
                    help="under SLURM: requeue the job after the save on its time-limit warning, "
                         "unless it was requeued this many times (config cluster.max_requeues; "
                         "time_limit.py); unset = never requeue, exit for a retry")
    ap.add_argument("--signal-warning-s", type=int, default=120,
                    help="seconds before the time limit at which SLURM signals the job (the "
                         "rule's --signal=TERM@N): a SIGTERM this close to the limit is its")
    ap.add_argument("--budget-of", help="a matched control: the manifest of the job whose "
                    "updates it trains (train_config.matched_budget)")
    ap.add_argument("--budget-share", type=float, default=1.0,
                    help="the share of those updates (the translation share of a cross-task job)")
    a = ap.parse_args(argv)
    cfg = json.loads(a.config_json)
    tcfg = TrainConfig.from_dict(cfg.get("train", {}))
    if a.budget_of:
        tcfg = matched_budget(tcfg, a.budget_of, a.budget_share)
    requeue = (RequeuePolicy(a.signal_warning_s, a.max_requeues)
               if a.max_requeues is not None else None)
    try:
        return train(cfg["model"], tcfg, a.shards, a.dev_shards, a.spm, a.out_dir, a.aux_shards,
                     a.attempt, requeue, cfg.get("pretokenize"))
    except (DamagedShard, ckpt.DamagedCheckpoint) as e:
        # one line naming the file; a DataLoader worker's error carries the worker's traceback
        # in its text, whose last line is "<module>.DamagedShard: <the message>"
        line = re.sub(r"^[\w.]*Damaged\w*: ", "", str(e).strip().splitlines()[-1])
        print(f"\ntrain: error: {line}", file=sys.stderr)    # after the progress bar's line
        return 2


if __name__ == "__main__":
    sys.exit(main())
