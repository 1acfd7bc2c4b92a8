"""Stage manifests: what went in (with checksums), what came out (counts), what was rejected.

Every stage writes one beside its outputs so that a number in the report can be traced back to
the exact inputs, parameters and library versions that produced it.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from pipeline_lib.atomic import write_text

_VERSIONED = ("torch", "stanza", "sentencepiece", "sacrebleu", "pyarrow", "pandas", "snakemake")


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_path(path: str | Path) -> str:
    """Checksum of a file, or of every file under a directory (names included)."""
    p = Path(path)
    if p.is_file():
        return sha256_file(p)
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(str(f.relative_to(p)).encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


@dataclass
class Manifest:
    """Collects a stage's record and writes it atomically as JSON."""

    stage: str
    params: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    rejected: Counter = field(default_factory=Counter)
    extra: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def add_input(self, path: str | Path) -> None:
        if Path(path).exists():
            self.inputs[str(path)] = sha256_path(path)

    def reject(self, reason: str, n: int = 1) -> None:
        self.rejected[reason] += n

    def write(self, path: str | Path) -> dict:
        record = {
            "stage": self.stage,
            "params": self.params,
            "inputs": self.inputs,
            "counts": self.counts,
            "rejected": dict(self.rejected),
            "rejected_total": sum(self.rejected.values()),
            **self.extra,
            "seconds": round(time.time() - self.started, 3),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "git_revision": git_revision(),
            "versions": versions(),
        }
        write_text(path, json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
        return record
