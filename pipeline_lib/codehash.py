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
import functools
import hashlib
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
PACKAGE = "pipeline_lib"


def _files(name: str, root: Path | None = None) -> list[Path]:
    """The source file of module ``pipeline_lib.<name>`` (a package's ``__init__.py``) under
    ``root`` (default: this package); [] when there is none."""
    root = root or PACKAGE_ROOT
    base = root.joinpath(*name.split(".")) if name else root
    f = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return [f] if f.exists() else []


def import_lines(f: Path, root: Path | None = None,
                 dynamic: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name relative to the package) of every package module ``f`` imports, in
    every form: ``import pipeline_lib.a``, ``from pipeline_lib import a`` and ``from
    pipeline_lib.a import b`` (``b`` too when it is a module), relative imports (``from . import
    b``, ``from ..a import b``), lazy ones inside functions. With ``dynamic``, also
    ``importlib.import_module`` of a literal name, or of ``f"{__package__}.{...}"`` /
    ``f"{__name__}.{...}"`` (counted as the module's own package): the layering test reads every
    form, the code hash follows static imports only (module docstring). ``root``: the package
    folder (a scratch copy in the layering test's self-test)."""
    root = root or PACKAGE_ROOT
    here = f.relative_to(root).with_suffix("").parts[:-1]   # f's package, relative
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name[len(PACKAGE) + 1:]) for a in node.names
                    if a.name.startswith(PACKAGE + ".")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here[: len(here) - node.level + 1] if node.level > 1 else here
                mod = ".".join([*parts, *(node.module or "").split(".")]).strip(".")
            elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                mod = node.module[len(PACKAGE) + 1:]
            else:
                continue
            # `from pipeline_lib.models import registry` imports a module, not just a name
            out += [(node.lineno, m) for m in (f"{mod}.{a.name}".strip(".") for a in node.names)
                    if _files(m, root)]
            if mod:
                out.append((node.lineno, mod))
        elif dynamic and isinstance(node, ast.Call) and node.args and \
                getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and str(arg.value).startswith(PACKAGE + "."):
                out.append((node.lineno, str(arg.value)[len(PACKAGE) + 1:]))
            elif isinstance(arg, ast.JoinedStr) and arg.values and \
                    getattr(getattr(arg.values[0], "value", None), "id", "") in ("__package__",
                                                                              "__name__"):
                out.append((node.lineno, ".".join(here)))
    return out


def _imported(f: Path) -> frozenset[str]:
    """Dotted names (relative to the package) of the package modules ``f`` imports."""
    return _imported_source(f, PACKAGE_ROOT, f.read_bytes())


@functools.lru_cache(maxsize=None)
def _imported_source(f: Path, root: Path, source: bytes) -> frozenset[str]:
    """:func:`_imported` of one text of ``f``: Snakemake hashes the code of every job while it
    builds the DAG, and parsing each module again for each job made a dry run of the tests'
    tiny run take 15 s instead of 4 (the text in the key keeps an edit seen)."""
    return frozenset(name for _, name in import_lines(f, root))


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
