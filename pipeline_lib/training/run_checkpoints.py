"""A training run's checkpoint folder (``<out-dir>/checkpoints/``) and what is kept in it: the
step checkpoints and their rotation, ``last``, ``best`` and ``best-kept``, the average of the
last k, and ``final``, the one every later stage evaluates.

WHY its own class: which weights a run ends on must not depend on whether it was interrupted.
Snakemake deletes the rule's outputs (``best``, ``final``) before a retry, so the best weights
are also kept as ``best-kept`` (no rule output), named with their step, from which a resumed run
re-creates ``best``; the rest of the trainer only says when to save and what. Writes happen on
the main process only (the trainer calls these methods there).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline_lib import checkpoint as ckpt
from pipeline_lib.layout import (CHECKPOINT_DIR, CKPT_AVERAGED, CKPT_BEST, CKPT_BEST_KEPT,
                                 CKPT_FINAL, CKPT_LAST)


class RunCheckpoints:
    """The checkpoints of one run; ``config`` (the model's) and ``record`` (the run's, see
    train.run_record) go into every checkpoint's ``config.yaml``."""

    def __init__(self, out_dir: Path, config: Mapping[str, Any], record: Mapping[str, Any],
                 spm_path: str | Path, log: Callable[[str], None],
                 extra_files: Mapping[str, str | Path] | None = None) -> None:
        self.dir = Path(out_dir) / CHECKPOINT_DIR
        self.config, self.record, self.spm_path, self._log = config, record, spm_path, log
        self.extra_files = dict(extra_files or {})   # save_checkpoint's: the truecasers

    def sweep(self) -> None:
        """Remove the temporary folders of a save killed midway."""
        for p in ckpt.sweep_tmp(self.dir):
            self._log(f"removed {p.name}, left by an interrupted save")

    def last(self) -> Path | None:
        return ckpt.resolve_checkpoint(self.dir / CKPT_LAST)

    def intact_last(self) -> Path | None:
        """``last`` for a resume, checked file by file (checkpoint.verify). A damaged one is
        replaced by the newest intact step checkpoint, which holds a trainer state too, so the
        run loses only the updates after that step; with none, it is set aside as
        ``<out-dir>/last.damaged`` and the run starts from scratch. Every step is logged."""
        last = self.last()
        if last is None:
            return None
        try:
            ckpt.verify(last)
            return last
        except ckpt.DamagedCheckpoint as e:
            self._log(f"resume: {e}")
        for step in reversed(self.steps()):
            try:
                ckpt.verify(step)
            except ckpt.DamagedCheckpoint as e:
                self._log(f"resume: {e}")
                continue
            ckpt.copy_checkpoint(step, last)
            self._log(f"resume: {CKPT_LAST} replaced by {step.name}, the newest intact step "
                      "checkpoint: the updates after it are trained again")
            return last
        # beside the checkpoint folder, which a run from scratch deletes (resume.clear_run)
        aside = self.dir.parent / f"{CKPT_LAST}.damaged"
        if aside.exists():
            shutil.rmtree(aside)
        last.rename(aside)
        self._log(f"resume: no intact step checkpoint to fall back on: {last} set aside as "
                  f"{aside}; training from scratch")
        return None

    def write(self, name: str, weights: Mapping, trainer_state: dict | None = None,
              extra: Mapping[str, Any] | None = None) -> None:
        """Checkpoint ``name`` (weights, the trainer state when resumable)."""
        ckpt.save_checkpoint(self.dir / name, weights, dict(self.config),
                             {**self.record, **(extra or {})}, self.spm_path, trainer_state,
                             self.extra_files)

    def rotate(self, step: int, keep: int) -> None:
        """``step-N`` copied to ``last``; only the newest ``keep`` step checkpoints stay."""
        ckpt.copy_checkpoint(self.dir / f"step-{step}", self.dir / CKPT_LAST)
        steps = self.steps()
        for p in steps[: max(0, len(steps) - keep)]:
            shutil.rmtree(p)

    def steps(self) -> list[Path]:
        """The step checkpoints, oldest first."""
        return [p for _, p in sorted((int(p.name.split("-")[1]), p)
                                     for p in self.dir.glob("step-*"))]

    def keep_best(self, weights: Mapping, step: int, value: float) -> None:
        """A new best: ``best-kept`` first (a resume re-creates ``best`` from it), then ``best``."""
        self.write(CKPT_BEST_KEPT, weights, extra={"best_step": step, "best_dev": float(value)})
        ckpt.link_checkpoint(self.dir / CKPT_BEST_KEPT, self.dir / CKPT_BEST)

    def restore_best(self, best_step: int) -> bool:
        """``best`` again from ``best-kept`` (Snakemake deleted it before this retry), when
        ``best-kept`` holds ``best_step`` (a SIGKILL after a new best and before the next save
        leaves a newer one); False when it does not."""
        kept = ckpt.resolve_checkpoint(self.dir / CKPT_BEST_KEPT)
        if kept is not None and ckpt.read_config(kept)["train"].get("best_step") == best_step:
            ckpt.link_checkpoint(kept, self.dir / CKPT_BEST)
            return True
        self._log(f"no weights of the best step {best_step} in {self.dir / CKPT_BEST_KEPT}: "
                  "best is chosen again from the next validation")
        return False

    def finalize(self, average_last_k: int, save_every: int, step: int) -> str:
        """``final``: the average of the last ``average_last_k`` step checkpoints (> 1), else
        ``best`` (``last`` when no validation ever improved on an infinite loss); returns the
        name it links."""
        chosen: Sequence[Path] = self.steps()[-average_last_k:] if average_last_k > 1 else []
        if chosen:
            self.write(CKPT_AVERAGED, ckpt.average_states(chosen),
                       extra={"averaged": [p.name for p in chosen]})
        elif average_last_k > 1:   # save_every > the updates run: no step checkpoint to average
            self._log(f"average_last_k={average_last_k}: no step checkpoint was saved "
                      f"(save_every {save_every}, {step} updates): final is {CKPT_BEST}")
        final = CKPT_AVERAGED if chosen else CKPT_BEST
        if ckpt.resolve_checkpoint(self.dir / final) is None:
            final = CKPT_LAST
        ckpt.link_checkpoint(self.dir / final, self.dir / CKPT_FINAL)
        return final
