"""Imports follow the DAG (the package mirrors it: README Layout).

A stage package (one per group of rule files) imports the kernel (the top-level modules and the
models) and itself, never another stage: what two stages share lives in the kernel
(checkpoint, documents, fetch). The kernel imports no stage, so planning the DAG needs no
stage's code. The tools a user runs by hand on a finished run (translate, export) sit on top and
may read any stage. Checked over the AST in every import form (pipeline_lib.codehash.import_lines:
``import pipeline_lib.a``, ``from pipeline_lib import a``, ``from pipeline_lib.a import b``,
relative imports, ``importlib.import_module``), lazy imports inside functions included."""

from __future__ import annotations

import sys

from conftest import ROOT

from pipeline_lib.codehash import import_lines

PACKAGE = ROOT / "pipeline_lib"
STAGES = {"ingest", "parse", "preprocess", "training", "evaluate"}
TOOLS = {"translate", "export"}


def _layer(parts: tuple[str, ...]) -> str:
    """A module's top-level name below pipeline_lib: its stage, tool, or the kernel."""
    top = parts[0].removesuffix(".py")
    return top if top in STAGES | TOOLS else "kernel"


def crossings() -> list[str]:
    bad = []
    for f in sorted(PACKAGE.rglob("*.py")):
        own = _layer(f.relative_to(PACKAGE).parts)
        for line, module in import_lines(f, PACKAGE, dynamic=True):
            target = _layer(tuple(module.split(".")) if module else ("__init__",))
            if own in TOOLS or target in (own, "kernel"):
                continue
            bad.append(f"{f.relative_to(ROOT)}:{line}: {own} imports pipeline_lib.{module}")
    return bad


def test_no_stage_imports_another_and_the_kernel_imports_no_stage():
    assert crossings() == []


def test_the_check_sees_a_crossing_in_every_import_form(tmp_path, monkeypatch):
    """The check itself: a module importing across the layers is reported with its line, in
    each form an import can take (issue 28: `from pipeline_lib import X`, relative imports and
    importlib went unseen)."""
    fake = tmp_path / "pipeline_lib"
    for package in ("training", "preprocess", "ingest", "evaluate", "parse"):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text("")
        (fake / package / "x.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "training" / "data.py").write_text(
        "import os\n\nfrom pipeline_lib.preprocess.noise import x\n"
        "from pipeline_lib import ingest\n"
        "from ..parse import x\n"
        "from . import x\n")
    (fake / "evaluate" / "score.py").write_text(
        "import importlib\n\n"
        "def f():\n    return importlib.import_module('pipeline_lib.training.x')\n"
        "def g(name):\n    return importlib.import_module(f'{__package__}.{name}')\n")
    (fake / "plan.py").write_text("def f():\n    from pipeline_lib.ingest import reader_module\n"
                                  "import pipeline_lib.parse.x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert sorted(crossings()) == sorted([
        "pipeline_lib/evaluate/score.py:4: evaluate imports pipeline_lib.training.x",
        "pipeline_lib/plan.py:2: kernel imports pipeline_lib.ingest",
        "pipeline_lib/plan.py:3: kernel imports pipeline_lib.parse.x",
        "pipeline_lib/training/data.py:3: training imports pipeline_lib.preprocess.noise",
        "pipeline_lib/training/data.py:4: training imports pipeline_lib.ingest",
        "pipeline_lib/training/data.py:5: training imports pipeline_lib.parse",
        "pipeline_lib/training/data.py:5: training imports pipeline_lib.parse.x"])
