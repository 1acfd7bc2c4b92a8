"""Where things are: the checkout's own folders, resolved inside the process that needs them.

WHY a function and not a rule parameter: a path of the checkout in a rule's ``params`` is a
rerun trigger, so a moved checkout (or a cluster mounting it elsewhere) would rerun the rule;
the rule passes the configured value and the job resolves it here.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = ROOT / "third_party"   # the UD treebank files the repository ships (licence inside)


def shared_dir(configured: str | Path | None = None) -> Path:
    """Material machines cannot download (UD treebanks under ``ud/``): env ``DOCMT_SHARED``,
    else the configured ``shared_dir``, else the repository's ``third_party/``."""
    return Path(os.environ.get("DOCMT_SHARED") or configured or THIRD_PARTY)
