"""Shared fixtures: paths to the project and to the shared material (UD treebanks)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared folder (UD treebanks); DOCMT_SHARED overrides the default ../shared."""
    return Path(os.environ.get("DOCMT_SHARED", ROOT.parent / "shared"))
