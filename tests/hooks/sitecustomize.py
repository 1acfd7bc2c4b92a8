"""Test-only: a slow ``checkpoints/last`` save, to show who waits for it (issue 11, item 9).

Python imports ``sitecustomize`` from PYTHONPATH at start-up; only
tests/integration/test_slurm_training.py puts this folder there, and the hook acts only when
``DOCMT_TEST_SAVE_DELAY_S`` is set. It wraps ``pipeline_lib.checkpoint.save_checkpoint``
so that a save of ``last`` sleeps that long before it writes (as a large model's save takes
long): a process killed during the sleep leaves no ``last``, exactly like one killed mid-write.
Everything else (the trainer's signal handling, the rule's shell, Snakemake, the shims) runs
unchanged.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import time
from pathlib import Path

DELAY_S = float(os.environ.get("DOCMT_TEST_SAVE_DELAY_S") or 0)
TARGET = "pipeline_lib.checkpoint"


def _slow_down(module) -> None:
    save = module.save_checkpoint

    def slow_save(path, *args, **kwargs):
        if Path(path).name == "last":
            print(f"test hook: saving {path} takes {DELAY_S:g} s", file=sys.stderr, flush=True)
            time.sleep(DELAY_S)
        return save(path, *args, **kwargs)

    module.save_checkpoint = slow_save


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the checkpoint module as usual and patches it once it has been executed."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _slow_down(module)

        spec.loader.exec_module = exec_module
        return spec


if DELAY_S > 0:
    sys.meta_path.insert(0, _Finder())
