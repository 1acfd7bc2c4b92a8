"""Imports follow the DAG (the package mirrors it: README Layout).

A stage package (one per group of rule files) imports the kernel (the top-level modules and the
models) and itself, never another stage: what two stages share lives in the kernel
(checkpoint, documents, fetch). The kernel imports no stage, so planning the DAG needs no
stage's code. The tools a user runs by hand on a finished run (translate, export) sit on top and
may read any stage. Checked over the AST, lazy imports inside functions included."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "pipeline_lib"
STAGES = {"ingest", "parse", "preprocess", "training", "evaluate"}
TOOLS = {"translate", "export"}


def _imports(f: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.append((node.lineno, node.module))
    return [(n, m) for n, m in out if m.startswith("pipeline_lib.")]


def _layer(parts: tuple[str, ...]) -> str:
    """A module's top-level name below pipeline_lib: its stage, tool, or the kernel."""
    top = parts[0].removesuffix(".py")
    return top if top in STAGES | TOOLS else "kernel"


def crossings() -> list[str]:
    bad = []
    for f in sorted(PACKAGE.rglob("*.py")):
        own = _layer(f.relative_to(PACKAGE).parts)
        for line, module in _imports(f):
            target = _layer(tuple(module.split(".")[1:]) or ("__init__",))
            if own in TOOLS or target in (own, "kernel"):
                continue
            bad.append(f"{f.relative_to(ROOT)}:{line}: {own} imports {module}")
    return bad


def test_no_stage_imports_another_and_the_kernel_imports_no_stage():
    assert crossings() == []


def test_the_check_sees_a_crossing(tmp_path, monkeypatch):
    """The check itself: a stage module importing another stage is reported with its line."""
    fake = tmp_path / "pipeline_lib"
    (fake / "training").mkdir(parents=True)
    (fake / "training" / "data.py").write_text("import os\n\n"
                                              "from pipeline_lib.preprocess.noise import x\n")
    (fake / "plan.py").write_text("def f():\n    from pipeline_lib.ingest import reader_module\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert crossings() == [
        "pipeline_lib/plan.py:2: kernel imports pipeline_lib.ingest",
        "pipeline_lib/training/data.py:3: training imports pipeline_lib.preprocess.noise"]
