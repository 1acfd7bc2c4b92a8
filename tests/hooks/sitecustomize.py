"""Test-only: a slow ``checkpoints/last`` save, to show who waits for it (issue 11, item 9), and
a set number of updates per attempt, so a tiny training needs a set number of time limits
(issue 33, item 2).

Python imports ``sitecustomize`` from PYTHONPATH at start-up; only
tests/integration/test_slurm_training.py puts this folder there, and the hook acts only when
``DOCMT_TEST_SAVE_DELAY_S`` or ``DOCMT_TEST_UPDATES_PER_ATTEMPT`` is set. The first wraps
``pipeline_lib.checkpoint.save_checkpoint`` so that a save of ``last`` sleeps that long before it
writes (as a large model's save takes long): a process killed during the sleep leaves no
``last``, exactly like one killed mid-write. With the second = N, a trainer process makes N
optimiser updates (``pipeline_lib.training.update.Updater.update``), then waits for its stop
signal before the next one, after which the trainer saves: N + 1 updates per attempt, however
fast the machine starts a job. Everything else (the
trainer's signal handling, the rule's shell, Snakemake, the shims) runs unchanged, and neither
changes what is computed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from pathlib import Path

SAVE_DELAY_S = float(os.environ.get("DOCMT_TEST_SAVE_DELAY_S") or 0)
UPDATES_PER_ATTEMPT = int(os.environ.get("DOCMT_TEST_UPDATES_PER_ATTEMPT") or 0)


def _slow_saves(module) -> None:
    save = module.save_checkpoint

    def slow_save(path, *args, **kwargs):
        if Path(path).name == "last":
            print(f"test hook: saving {path} takes {SAVE_DELAY_S:g} s", file=sys.stderr,
                  flush=True)
            time.sleep(SAVE_DELAY_S)
        return save(path, *args, **kwargs)

    module.save_checkpoint = slow_save


def _few_updates(module) -> None:
    import signal
    import threading

    update = module.Updater.update
    done, stop = [0], threading.Event()

    def few_updates(self, *args, **kwargs):
        if done[0] == UPDATES_PER_ATTEMPT:   # the trainer's own handler is in place by now
            trainers = signal.getsignal(signal.SIGTERM)

            def on_stop(signum, frame):
                stop.set()
                trainers(signum, frame)

            signal.signal(signal.SIGTERM, on_stop)
            print(f"test hook: {done[0]} updates made, waiting for the stop signal",
                  file=sys.stderr, flush=True)
            while not stop.wait(0.05):
                pass
        done[0] += 1
        return update(self, *args, **kwargs)

    module.Updater.update = few_updates


PATCHES = {name: patch for name, patch, on in (
    ("pipeline_lib.checkpoint", _slow_saves, SAVE_DELAY_S > 0),
    ("pipeline_lib.training.update", _few_updates, UPDATES_PER_ATTEMPT > 0)) if on}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds a patched module as usual and patches it once it has been executed."""

    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if PATCHES:
    sys.meta_path.insert(0, _Finder())
