"""Hash of library modules, used as a Snakemake ``params`` entry.

Snakemake's code trigger only sees a rule's own ``shell``/``run`` text, not the library it calls.
Putting this hash in ``params`` makes a change in ``pipeline_lib/<module>`` rerun the rules that
use it (and only those). The modules a rule names are followed through their ``pipeline_lib``
imports (lazy ones inside functions too), so a rule cannot miss a helper its entry point
reaches: a hand-kept list went stale as soon as a module gained an import.

Only static imports are followed, and a package stands for its ``__init__.py`` alone: the
places that choose a module by name at run time (the model registry, the ingest readers) are
where one job's code differs from another's, so the rule names that module itself
(``Plan.train_code``, ``pipeline_lib.ingest.code_modules``) and a job hashes what it runs, not its siblings.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
PACKAGE = "pipeline_lib"


def _files(name: str) -> list[Path]:
    """The source file of module ``pipeline_lib.<name>`` (a package's ``__init__.py``); []
    when there is none."""
    base = PACKAGE_ROOT.joinpath(*name.split(".")) if name else PACKAGE_ROOT
    f = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return [f] if f.exists() else []


def _imported(f: Path) -> set[str]:
    """Dotted names (relative to the package) of the package modules ``f`` imports."""
    here = f.relative_to(PACKAGE_ROOT).with_suffix("").parts[:-1]   # f's package, relative
    names: set[str] = set()
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            names |= {a.name[len(PACKAGE) + 1:] for a in node.names
                      if a.name.startswith(PACKAGE + ".")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here[: len(here) - node.level + 1] if node.level > 1 else here
                mod = ".".join([*parts, *(node.module or "").split(".")]).strip(".")
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                mod = node.module[len(PACKAGE) + 1:]
            else:
                continue
            # `from pipeline_lib.models import registry` imports a module, not just a name
            names |= {m for m in (f"{mod}.{a.name}".strip(".") for a in node.names) if _files(m)}
            if mod:
                names.add(mod)
    return names


def _parents(name: str) -> list[str]:
    """The packages Python initialises before module ``name`` (``models.cache`` -> ``models``)."""
    parts = name.split(".")[:-1]
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def closure(*modules: str) -> list[Path]:
    """The files of ``modules``, of the packages that hold them and of every package module they
    import, transitively."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        files = _files(name)
        if not files:
            raise FileNotFoundError(f"code_hash: no module {PACKAGE}.{name} under {PACKAGE_ROOT}")
        for f in files:
            if f not in seen:
                seen.add(f)
                todo.extend(n for n in [*_parents(name), *_imported(f)] if _files(n))
    return sorted(seen)


def code_hash(*modules: str) -> str:
    """sha256 (16 hex chars) over the source of the named modules and of what they import from
    the package. ``modules`` are dotted names relative to ``pipeline_lib`` (``"ingest.__main__"``,
    ``"models.cache"``)."""
    h = hashlib.sha256()
    for f in closure(*sorted(set(modules))):
        h.update(str(f.relative_to(PACKAGE_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
