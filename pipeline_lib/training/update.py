"""One optimiser update: ``update_freq`` micro-batches forward and backward (DDP, autocast,
compiled or eager), the loss normalised by the global number of target tokens, clipping, the
optimiser and the schedule.

WHY its own class: the update is the trainer's hot path and what bench/train_throughput.py and
bench/trainer_efficiency.py measure against; kept apart from resuming, validation and
checkpoints, it reads as the equations of the loss, and what it costs is all in one place.
Quantities stay tensors (added to the caller's ``Window``), so an update never waits for the
device.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.models.inputs import ModelInputs
from pipeline_lib.training.compiled import compile_model
from pipeline_lib.training.distributed import DistInfo, all_reduce
from pipeline_lib.training.metrics import Window
from pipeline_lib.training.optim import build_optimizer, build_scheduler, label_smoothed_nll
from pipeline_lib.training.phases import PhaseClock
from pipeline_lib.training.reproducibility import seed_step
from pipeline_lib.training.validation import autocast
from pipeline_lib.vocab import PAD_ID

SUPERVISION = ("src_heads", "src_tokens", "tgt_heads", "tgt_tokens")


def supervision_counts(batch: Batch) -> torch.Tensor:
    """(4,) tensor in :data:`SUPERVISION` order: source tokens with a gold head, source tokens,
    target tokens with a gold head, target tokens (EOS/BOS excluded: they never have one)."""
    src_tok = batch.src.ne(PAD_ID).sum() - batch.src.size(0)
    tgt_tok = batch.tgt_out.ne(PAD_ID).sum() - batch.tgt_out.size(0)
    zero = torch.zeros((), dtype=torch.long, device=batch.src.device)
    src_sup = batch.src_heads.ge(0).sum() if batch.src_heads is not None else zero
    tgt_sup = batch.tgt_heads.ge(0).sum() if batch.tgt_heads is not None else zero
    return torch.stack([src_sup, src_tok, tgt_sup, tgt_tok])


class Updater:
    """The model's optimiser, schedule and forward (DDP-wrapped and compiled as configured)."""

    def __init__(self, model: torch.nn.Module, trainable: list[torch.nn.Parameter], tcfg,
                 info: DistInfo, device: torch.device, inputs: ModelInputs, phases: PhaseClock,
                 unused_parameters: bool) -> None:
        self.tcfg, self.info, self.device, self.inputs, self.phases = tcfg, info, device, inputs, phases
        self.trainable = trainable
        self.optimizer = build_optimizer(trainable, tcfg.lr)
        self.scheduler = build_scheduler(self.optimizer, tcfg.warmup)
        self.ddp = model
        if info.world_size > 1:
            # Sentence batches of a document-level model leave its document modules unused (on
            # every step without an aux stream), and two data streams may exercise different
            # parts of any model: DDP must be told, or it fails at the second step.
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None,
                find_unused_parameters=unused_parameters)
        self.forward, self.compiled = (compile_model(self.ddp) if tcfg.compile
                                       else (self.ddp, None))

    def update(self, step: int, aux: bool, next_batch: Callable[[bool], Batch],
               window: Window) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Update ``step`` (0-based) on micro-batches of the main (or ``aux``) stream; returns
        the global target tokens and, for a parse-supervised model, its supervision counts."""
        tcfg, info = self.tcfg, self.info
        # dropout masks depend on (seed, update, rank) alone: a resumed run draws the same
        seed_step(tcfg.seed, step, self.device, info.rank)
        self.optimizer.zero_grad(set_to_none=True)
        tokens = torch.zeros((), device=self.device)
        supervision = None
        phase = self.phases.phase
        for micro in range(tcfg.update_freq):
            with phase("next_batch"):
                batch = next_batch(aux)
            with phase("copy"):
                batch = batch.to(self.device)
            sync = micro == tcfg.update_freq - 1 or info.world_size == 1
            with nullcontext() if sync else self.ddp.no_sync():
                with phase("forward"):
                    with autocast(self.device):
                        out = self.forward(batch)
                    loss, _, n = label_smoothed_nll(out.logits, batch.tgt_out,
                                                    tcfg.label_smoothing)
                    if out.aux_loss is not None:  # per-token quantity: weight it like the CE
                        loss = loss + out.aux_loss.float() * n
                with phase("backward"):
                    loss.backward()
            for k, v in out.aux_metrics.items():   # rank 0's micro-batches
                window.add(k, v)
            tokens = tokens + n
            window.add("loss", loss)
            if self.inputs.heads:
                counts = supervision_counts(batch)
                supervision = counts if supervision is None else supervision + counts
        with phase("optimizer"):
            global_tokens = all_reduce(tokens.float(), info)
            scale = info.world_size / global_tokens.clamp(min=1.0)
            # one fused multiply over every gradient, not a kernel per parameter
            torch._foreach_mul_([p.grad for p in self.trainable if p.grad is not None], scale)
            if tcfg.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.trainable, tcfg.clip_norm)
            self.optimizer.step()
            self.scheduler.step()
        window.add("tokens", global_tokens)
        return global_tokens, supervision


class Tally:
    """Target tokens and parse supervision of the updates since the last save, summed on the
    device: read (one synchronisation, one reduction over ranks) only when a checkpoint saves
    them into the trainer state."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._reset()

    def _reset(self) -> None:
        self.tokens = torch.zeros((), device=self.device)
        self.supervision = torch.zeros(len(SUPERVISION), dtype=torch.long, device=self.device)

    def add(self, tokens: torch.Tensor, supervision: torch.Tensor | None) -> None:
        self.tokens = self.tokens + tokens
        if supervision is not None:
            self.supervision = self.supervision + supervision

    def settle(self, state, info: DistInfo) -> None:
        """Add the counts to ``state`` (a TrainerState: ``tokens``, ``supervision``), restart."""
        state.tokens += int(self.tokens)
        for key, n in zip(SUPERVISION, all_reduce(self.supervision, info).tolist()):
            state.supervision[key] += int(n)
        self._reset()
