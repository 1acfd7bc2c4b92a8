"""Hash of library modules, used as a Snakemake ``params`` entry.

Snakemake's code trigger only sees a rule's own ``shell``/``run`` text, not the library it calls.
Putting this hash in ``params`` makes a change in ``pipeline_lib/<module>`` rerun the rules that
use it (and only those).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent


def code_hash(*modules: str) -> str:
    """sha256 (16 hex chars) over the source of the named modules or subpackages.

    ``modules`` are dotted names relative to ``pipeline_lib`` (``"ingest"``, ``"models.layers"``);
    a subpackage includes all its ``.py`` files. The shared helpers every stage imports
    (``schema``, ``manifest``, ``constants``) are always included.
    """
    names = sorted(set(modules) | {"schema", "manifest", "constants"})
    h = hashlib.sha256()
    for name in names:
        base = PACKAGE_ROOT.joinpath(*name.split("."))
        files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
        if not files or not all(f.exists() for f in files):
            raise FileNotFoundError(f"code_hash: no module pipeline_lib.{name} at {base}")
        for f in files:
            h.update(str(f.relative_to(PACKAGE_ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
