"""Wall time per phase of a training update, for finding where a GPU run's time goes.

WHY a switch (``train.phase_times``): on CUDA the host only queues work, so a phase's wall time
means something only when the device is synchronised at its boundaries, and synchronising every
phase of every update costs the overlap of host and device that a normal run lives on. Off (the
default) it costs a ``record_function`` per phase (the profiler's names, ``trainer.<phase>``);
on, each phase is timed between two synchronisations and the sums appear in every train record
of ``metrics.jsonl`` (``phase_s``) and in the manifest.

Phases: ``next_batch`` (waiting for the loader), ``copy`` (host to device), ``forward`` (with
the loss), ``backward``, ``optimizer`` (gradient scaling, clipping, Adam, schedule) and ``log``
(train records and the progress bar): what the loop does besides its update.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.profiler import record_function

PHASES = ("next_batch", "copy", "forward", "backward", "optimizer", "log")


class PhaseClock:
    """Sums of wall seconds per phase: since the last :meth:`take` and over the whole run."""

    def __init__(self, device: torch.device, enabled: bool) -> None:
        self.enabled = enabled
        self._sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
        self.window = dict.fromkeys(PHASES, 0.0)
        self.total = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with record_function(f"trainer.{name}"):
            if not self.enabled:
                yield
                return
            if self._sync:
                self._sync()
            t = time.perf_counter()
            yield
            if self._sync:
                self._sync()
            dt = time.perf_counter() - t
            self.window[name] += dt
            self.total[name] += dt

    def take(self) -> dict[str, float]:
        """The window's sums (rounded to 0.1 ms), then a new window; {} when not enabled."""
        if not self.enabled:
            return {}
        out = {k: round(v, 4) for k, v in self.window.items()}
        self.window = dict.fromkeys(PHASES, 0.0)
        return out

    def totals(self) -> dict[str, float] | None:
        return {k: round(v, 3) for k, v in self.total.items()} if self.enabled else None
