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
step-N,averaged}/`` (see checkpoint.py), ``metrics.jsonl``, ``tb/`` (TensorBoard),
``manifest.json``.

Pre-emption: SIGTERM / SIGUSR1 (what SLURM sends before a time limit or pre-emption) set a flag;
after the current update the run saves ``last`` and exits with ``EXIT_REQUEUE`` (143), which
Snakemake's ``retries`` (or ``scontrol requeue``) turns into a restart that resumes from
``last``. A SIGKILL loses at most the updates since the last ``save_every`` checkpoint.
Multi-GPU: ``torchrun --nproc-per-node N -m pipeline_lib.training.train ...`` (NCCL on CUDA, gloo on CPU).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import random
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from pipeline_lib.training import checkpoint as ckpt
from pipeline_lib.batch import Batch
from pipeline_lib.codehash import code_hash
from pipeline_lib.constants import EOS_ID, MANIFEST_FILE, METRICS_FILE, PAD_ID
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader, dev_batches
from pipeline_lib.manifest import Manifest
from pipeline_lib.models.inputs import ModelInputs, Phase, inputs_for
from pipeline_lib.training.optim import build_optimizer, build_scheduler, label_smoothed_nll

SENTENCE_LEVEL = "@sentence_level"   # train.freeze token: the model's sentence_level_prefixes()
EXIT_REQUEUE = 143  # 128 + SIGTERM: "saved, please restart me"
CHECKPOINT_DIR = "checkpoints"
TB_DIR = "tb"


@dataclass(frozen=True)
class TrainConfig:
    """The ``train:`` section of config.yaml (the schema describes each key; defaults agree with
    it and fit the CPU default run, config.yaml's comment gives the papers' values)."""

    max_tokens: int = 4096
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
    compile: bool = False
    num_workers: int = 0
    device: str = "auto"
    buffer_sents: int = 20000
    dev_bleu: bool = True
    init_from: str | None = None
    freeze: tuple[str, ...] = ()
    aux_ratio: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.aux_ratio <= 1.0:
            raise ValueError(f"train.aux_ratio={self.aux_ratio} must lie in [0, 1]")

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


# ----------------------------------------------------------------------------- distributed


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_pref: str) -> tuple[DistInfo, torch.device]:
    """One process per device under torchrun (env WORLD_SIZE/RANK/LOCAL_RANK)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device_pref == "auto" else device_pref.startswith("cuda")
    device = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    return DistInfo(rank, world, local), device


def _all_reduce(value: float, info: DistInfo, device: torch.device, op: str = "sum") -> float:
    """``value`` reduced over ranks (``op`` in sum/min/max); the value itself on one process."""
    if info.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN,
                           "max": dist.ReduceOp.MAX}[op])
    return float(t.item())


# ----------------------------------------------------------------------------- model set-up


def apply_freeze(model: torch.nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Freeze parameters whose name matches any fnmatch pattern (``encoder.*``); return them.

    Two-step document-level training (DocT, Zhang et al. 2018) freezes the sentence-level
    parameters theta_s and trains only the context modules; the pattern ``@sentence_level``
    stands for the model's ``sentence_level_prefixes()`` (exactly theta_s)."""
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
                               "keep_last", "average_last_k", "patience", "dev_bleu",
                               "device", "compile"})


#: Modules whose source decides what a training step computes; a change restarts a run.
TRAINING_CODE = ("training.train", "models")


def run_record(tcfg: TrainConfig) -> dict[str, Any]:
    """The train config as saved in checkpoints, with the hash of the training code."""
    return {**tcfg.to_dict(), "code_hash": code_hash(*TRAINING_CODE)}


def same_run(saved: dict[str, Any], model_dict: dict[str, Any], tcfg: TrainConfig) -> bool:
    """Whether checkpoint metadata ``saved`` belongs to this run, so resuming is meaningful.

    A Snakemake retry after pre-emption must continue; a re-run after a change of the model,
    of the optimisation settings or of the training code must not continue the old run."""
    now = {k: v for k, v in run_record(tcfg).items() if k not in RESUMABLE_CHANGES}
    before = {k: v for k, v in saved.get("train", {}).items() if k not in RESUMABLE_CHANGES}
    return saved.get("model") == model_dict and before == now


# ----------------------------------------------------------------------------- bookkeeping


class MetricsLog:
    """metrics.jsonl (one JSON object per line) + TensorBoard scalars, main process only."""

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


class StopFlag:
    """Set by SIGTERM/SIGUSR1; checked between updates so a save never races an update."""

    def __init__(self) -> None:
        self.signum = 0
        for s in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(s, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum


# ----------------------------------------------------------------------------- evaluation


def _autocast(device: torch.device):
    """bf16 autocast on CUDA (no loss scaling needed); fp32 on CPU, where bf16 is slow."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


@torch.no_grad()
def dev_loss(model: torch.nn.Module, batches: list[Batch], epsilon: float,
             device: torch.device) -> dict[str, float]:
    """Per-token label-smoothed loss and NLL (and perplexity) on the dev batches."""
    was_training = model.training
    model.eval()
    tot_loss = tot_nll = 0.0
    ntok = 0
    for b in batches:
        b = b.to(device)
        with _autocast(device):
            out = model(b)
        loss, nll, n = label_smoothed_nll(out.logits, b.tgt_out, epsilon)
        tot_loss += float(loss)
        tot_nll += float(nll)
        ntok += n
    model.train(was_training)
    nll_tok = tot_nll / max(ntok, 1)
    return {"loss": tot_loss / max(ntok, 1), "nll": nll_tok, "ppl": math.exp(min(nll_tok, 50.0))}


def dev_bleu(model: torch.nn.Module, batches: list[Batch], spm_path: str | Path,
             device: torch.device, inputs: ModelInputs = ModelInputs()) -> float:
    """Corpus BLEU (sacrebleu) of greedy translations of the dev batches.

    Greedy rather than beam search keeps validation cheap; references are the detokenised
    reference ids (sentencepiece round-trips text, so this equals the shard's ``tgt_text`` up to
    unknown characters). The model's tag (``inputs.tag``) is stripped from hypotheses and
    references."""
    import sacrebleu
    import sentencepiece as spm

    from pipeline_lib.models.search import BeamConfig, greedy_search

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    search_cfg = BeamConfig(beam=1, greedy=True)
    hyps, refs = [], []
    was_training = model.training
    model.eval()
    for b in batches:
        b = b.to(device)
        with _autocast(device):
            found = greedy_search(model, b, search_cfg)
        for nbest, ref in zip(found, b.tgt_out.tolist()):
            hyps.append(sp.decode(inputs.strip_tag(nbest[0].tokens if nbest else [])))
            refs.append(sp.decode(inputs.strip_tag([t for t in ref if t not in (PAD_ID, EOS_ID)])))
    model.train(was_training)
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


# ----------------------------------------------------------------------------- the loop


@dataclass
class TrainerState:
    """What, besides weights, a resumed run needs to continue exactly."""

    step: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    best_dev: float = math.inf
    bad_evals: int = 0
    tokens: int = 0
    aux_position: DataPosition = field(default_factory=DataPosition)


def _model_config(d: dict[str, Any], spm_path: str | Path):
    from pipeline_lib.models.config import ModelConfig

    d = dict(d)
    if not d.get("vocab_size"):
        import sentencepiece as spm

        d["vocab_size"] = spm.SentencePieceProcessor(model_file=str(spm_path)).get_piece_size()
    return ModelConfig.from_dict(d)


def train(model_dict: dict[str, Any], tcfg: TrainConfig, shards: str | Path, dev_shards: str | Path,
          spm_path: str | Path, out_dir: str | Path, aux_shards: str | Path | None = None) -> int:
    """Run (or resume) training; returns the process exit code (0, or EXIT_REQUEUE)."""
    from pipeline_lib.models.registry import build_model

    out_dir = Path(out_dir)
    info, device = init_distributed(tcfg.device)
    random.seed(tcfg.seed)
    np.random.seed(tcfg.seed)
    torch.manual_seed(tcfg.seed)
    stop = StopFlag()
    manifest = Manifest(stage="train_model", params={"train": tcfg.to_dict(), "model": model_dict})
    if info.is_main:
        for p in (shards, dev_shards, spm_path, aux_shards):
            if p is not None:
                manifest.add_input(p)
    if tcfg.aux_ratio > 0 and aux_shards is None:
        raise ValueError(f"train.aux_ratio={tcfg.aux_ratio} needs --aux-shards")

    mcfg = _model_config(model_dict, spm_path)
    model = build_model(mcfg).to(device)
    ck_dir = out_dir / CHECKPOINT_DIR
    last = ckpt.resolve_checkpoint(ck_dir / "last")
    if last is not None and not same_run(ckpt.read_config(last), mcfg.to_dict(), tcfg):
        if info.is_main:
            print(f"{last} was trained with another configuration: starting afresh", file=sys.stderr)
            shutil.rmtree(ck_dir)
        if info.world_size > 1:
            dist.barrier()
        last = None
    init_keys = None
    if tcfg.init_from and last is None:
        init_keys = init_from_checkpoint(model, tcfg.init_from)
        if info.is_main:
            print(f"init_from {tcfg.init_from}: missing={init_keys['missing']} "
                  f"unexpected={init_keys['unexpected']}", file=sys.stderr)
    frozen = apply_freeze(model, tcfg.freeze)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(trainable, tcfg.lr)
    scheduler = build_scheduler(optimizer, tcfg.warmup)

    state = TrainerState()
    if last is not None:
        model.load_state_dict(ckpt.load_state(last, device))
        ts = ckpt.load_trainer_state(last)
        optimizer.load_state_dict(ts["optimizer"])
        scheduler.load_state_dict(ts["scheduler"])
        state = TrainerState(step=ts["step"], position=DataPosition.from_dict(ts["position"]),
                             best_dev=ts["best_dev"], bad_evals=ts["bad_evals"], tokens=ts["tokens"],
                             aux_position=DataPosition.from_dict(ts.get("aux_position", {"epoch": 0, "batches": 0})))
        if ckpt.resolve_checkpoint(ck_dir / "best") is None:
            state.best_dev = math.inf  # best/ was removed (e.g. by Snakemake): re-create it
        ckpt.set_rng_state(ts["rng"][min(info.rank, len(ts["rng"]) - 1)])
        if info.is_main:
            print(f"resumed from {last} at step {state.step}, data {state.position}", file=sys.stderr)

    ddp_model = model
    if info.world_size > 1:
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    fwd = torch.compile(ddp_model) if tcfg.compile else ddp_model

    inputs = inputs_for(model, spm_path)
    lcfg = LoaderConfig(max_tokens=tcfg.max_tokens, seed=tcfg.seed, buffer_sents=tcfg.buffer_sents,
                        max_len=mcfg.max_len, num_workers=tcfg.num_workers, inputs=inputs)
    # A document-level model reads sentence batches from --shards; its document-level batches
    # (restoration or parallel documents) come from --aux-shards.
    loader = TrainLoader(shards, replace(lcfg, inputs=inputs.sentence_batches()), info.rank,
                         info.world_size)
    aux_loader = (TrainLoader(aux_shards, lcfg, info.rank, info.world_size)
                  if aux_shards is not None and tcfg.aux_ratio > 0 else None)
    dev = (dev_batches(dev_shards, tcfg.max_tokens, mcfg.max_len, inputs, tcfg.seed)
           if info.is_main else [])
    bleu_skip = inputs.dev_bleu_skip
    if tcfg.dev_bleu and bleu_skip and info.is_main:
        print(f"dev BLEU skipped: {bleu_skip}", file=sys.stderr)
    log = MetricsLog(out_dir, state.step, info.is_main)
    train_cfg_record = run_record(tcfg)

    def save(name: str) -> None:
        """Save ``last`` (with trainer state) under ``name``; every rank contributes its RNG."""
        rngs = [ckpt.rng_state()]
        if info.world_size > 1:
            rngs = [None] * info.world_size
            dist.all_gather_object(rngs, ckpt.rng_state())
        if info.is_main:
            ts = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                  "rng": rngs, "position": state.position.to_dict(), "step": state.step,
                  "aux_position": state.aux_position.to_dict(),
                  "best_dev": state.best_dev, "bad_evals": state.bad_evals, "tokens": state.tokens}
            ckpt.save_checkpoint(ck_dir / name, model.state_dict(), mcfg.to_dict(),
                                 train_cfg_record, spm_path, ts)
        if info.world_size > 1:
            dist.barrier()

    def validate() -> bool:
        """Dev loss/BLEU, best checkpoint, early stopping; True when patience ran out."""
        stop_now = 0.0
        if info.is_main:
            m = dev_loss(model, dev, tcfg.label_smoothing, device)
            if tcfg.dev_bleu and not bleu_skip:
                m["bleu"] = dev_bleu(model, dev, spm_path, device, inputs)
            log.write({"step": state.step, "split": "dev", **m})
            if m["loss"] < state.best_dev:
                state.best_dev, state.bad_evals = m["loss"], 0
                ckpt.save_checkpoint(ck_dir / "best", model.state_dict(), mcfg.to_dict(),
                                     train_cfg_record, spm_path)
            else:
                state.bad_evals += 1
            stop_now = float(tcfg.patience > 0 and state.bad_evals >= tcfg.patience)
        return _all_reduce(stop_now, info, device, "max") > 0

    def prune() -> None:
        steps = sorted((int(p.name.split("-")[1]), p) for p in ck_dir.glob("step-*"))
        for _, p in steps[: max(0, len(steps) - max(tcfg.keep_last, tcfg.average_last_k))]:
            shutil.rmtree(p)

    streams = {False: loader.iterate(state.position)}
    if aux_loader is not None:
        streams[True] = aux_loader.iterate(state.aux_position)

    def next_batch(aux: bool) -> Batch:
        """Next micro-batch of the main (or aux) data; all ranks move to the next epoch
        together when any runs out. Updates the stream's position in ``state``."""
        while True:
            item = next(streams[aux], None)
            if _all_reduce(float(item is not None), info, device, "min") > 0:
                if aux:
                    state.aux_position = item[0]
                else:
                    state.position = item[0]
                return item[1]
            pos = state.aux_position if aux else state.position
            pos = DataPosition(pos.epoch + 1, 0)
            if aux:
                state.aux_position = pos
                streams[aux] = aux_loader.iterate(pos)
            else:
                state.position = pos
                streams[aux] = loader.iterate(pos)

    model.train()
    bar = tqdm(total=tcfg.max_steps, initial=state.step, disable=not info.is_main,
               mininterval=1.0 if sys.stderr.isatty() else 30.0, desc="train", dynamic_ncols=True)
    exit_code, last_val = 0, -1
    t0, tok_window, loss_window, ntok_window = time.time(), 0, 0.0, 0
    aux_window: dict[str, list[float]] = {}
    while state.step < tcfg.max_steps:
        optimizer.zero_grad(set_to_none=True)
        step_tokens, step_loss = 0, 0.0
        aux = (aux_loader is not None
               and inputs.schedule(state.step, tcfg.aux_ratio) is Phase.DOCUMENT)
        for micro in range(tcfg.update_freq):
            batch = next_batch(aux).to(device)
            sync = micro == tcfg.update_freq - 1 or info.world_size == 1
            ctx = nullcontext() if sync else ddp_model.no_sync()
            with ctx:
                with _autocast(device):
                    out = fwd(batch)
                loss, nll, n = label_smoothed_nll(out.logits, batch.tgt_out, tcfg.label_smoothing)
                if out.aux_loss is not None:  # per-token quantity: weight it like the CE
                    loss = loss + out.aux_loss.float() * n
                loss.backward()
            for k, v in out.aux_metrics.items():
                aux_window.setdefault(k, []).append(float(v))
            step_tokens += n
            step_loss += float(loss.detach())
        # Normalise by the global token count (DDP already averaged over ranks).
        global_tokens = _all_reduce(float(step_tokens), info, device)
        scale = info.world_size / max(global_tokens, 1.0)
        for p in trainable:
            if p.grad is not None:
                p.grad.mul_(scale)
        if tcfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(trainable, tcfg.clip_norm)
        optimizer.step()
        scheduler.step()
        state.step += 1
        state.tokens += int(global_tokens)
        tok_window += int(global_tokens)
        loss_window += _all_reduce(step_loss, info, device)
        ntok_window += int(global_tokens)
        bar.update(1)
        if state.step % tcfg.log_every == 0 or state.step == tcfg.max_steps:
            dt = time.time() - t0
            rec = {"step": state.step, "split": "train", "loss": loss_window / max(ntok_window, 1),
                   "tokens_per_s": tok_window / max(dt, 1e-9), "lr": scheduler.get_last_lr()[0],
                   "epoch": state.position.epoch,
                   **{k: sum(v) / len(v) for k, v in aux_window.items()}}  # rank 0's micro-batches
            log.write(rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_s']:.0f}")
            t0, tok_window, loss_window, ntok_window = time.time(), 0, 0.0, 0
            aux_window = {}
        stopping, t_pause = False, time.time()
        if state.step % tcfg.validate_every == 0:
            stopping = validate()
            last_val = state.step
        if state.step % tcfg.save_every == 0:
            save(f"step-{state.step}")
            if info.is_main:
                ckpt.copy_checkpoint(ck_dir / f"step-{state.step}", ck_dir / "last")
                prune()
        signalled = _all_reduce(float(stop.signum), info, device, "max")
        if signalled:
            save("last")
            exit_code = EXIT_REQUEUE
            if info.is_main:
                print(f"signal {int(signalled)}: saved last at step {state.step}, exiting "
                      f"{EXIT_REQUEUE} for requeue", file=sys.stderr)
            break
        t0 += time.time() - t_pause  # tokens/s counts training time only
        if stopping:
            if info.is_main:
                print(f"early stop at step {state.step}: dev loss did not improve in "
                      f"{tcfg.patience} validations", file=sys.stderr)
            break
    bar.close()

    if exit_code == 0:
        if last_val != state.step:
            validate()
        save("last")
        if info.is_main and tcfg.average_last_k > 1:
            steps = sorted((int(p.name.split("-")[1]), p) for p in ck_dir.glob("step-*"))
            chosen = [p for _, p in steps[-tcfg.average_last_k:]]
            ckpt.save_checkpoint(ck_dir / "averaged", ckpt.average_states(chosen), mcfg.to_dict(),
                                 {**train_cfg_record, "averaged": [p.name for p in chosen]}, spm_path)
        if info.is_main:
            manifest.counts = {"steps": state.step, "target_tokens": state.tokens,
                               "epochs_started": state.position.epoch + 1,
                               "parameters": sum(p.numel() for p in model.parameters()),
                               "trainable_parameters": sum(p.numel() for p in trainable),
                               "frozen_parameters": len(frozen)}
            manifest.extra = {"best_dev_loss": state.best_dev, "init_from": init_keys,
                              "data_mode": inputs.mode.value, "dev_bleu_skipped": bleu_skip,
                              "aux_position": state.aux_position.to_dict(),
                              "world_size": info.world_size, "device": str(device)}
            manifest.write(out_dir / MANIFEST_FILE)
    log.close()
    if info.world_size > 1:
        dist.destroy_process_group()
    return exit_code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-json", required=True,
                    help='{"model": {ModelConfig fields}, "train": {TrainConfig fields}}')
    ap.add_argument("--shards", required=True, help="directory of training shard-*.parquet")
    ap.add_argument("--dev-shards", required=True, help="directory of dev shard-*.parquet")
    ap.add_argument("--spm", required=True, help="sentencepiece model (copied into checkpoints)")
    ap.add_argument("--out-dir", required=True, help="results/train_model/{model}")
    ap.add_argument("--aux-shards", help="directory of the document-level shard-*.parquet drawn on "
                    "a share train.aux_ratio of the updates (cross-task: restore/ or doc/)")
    a = ap.parse_args(argv)
    cfg = json.loads(a.config_json)
    return train(cfg["model"], TrainConfig.from_dict(cfg.get("train", {})), a.shards,
                 a.dev_shards, a.spm, a.out_dir, a.aux_shards)


if __name__ == "__main__":
    sys.exit(main())
