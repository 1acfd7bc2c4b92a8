"""Atomic outputs: a stage's file (or directory) appears under its final name only when complete.

A stage that fails halfway must not leave a ``docs.parquet`` holding the rows read so far: run
from the command line nothing would delete it, and a later stage (or a person) would take it for
the corpus. So every writer works on a hidden sibling name and renames it in one step when its
block finishes; when the block raises, the partial file is deleted and an older complete output,
if any, is left untouched. The sibling is in the same directory, hence on the same filesystem,
where ``os.replace`` is atomic. Stages write their ``manifest.json`` last, so a manifest is the
sign that everything beside it is complete.

A process killed outright (SIGKILL, out of memory) cannot delete its partial file; the name
carries the host and process id, so the next writer of the same output removes partials of
processes of this host that no longer run (a live process's, or another host's on a shared
filesystem, are left alone).
"""

from __future__ import annotations

import os
import shutil
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def partial_name(path: str | Path) -> Path:
    """Where ``path`` is written until it is complete (hidden, per host and process)."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial-{_host()}-{os.getpid()}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # someone else's process
        return True
    return True


def discard_stale(path: str | Path) -> list[Path]:
    """Delete the partials of ``path`` left by killed processes of this host; returns them."""
    path = Path(path)
    prefix = f".{path.name}.partial-{_host()}-"
    stale = []
    if path.parent.is_dir():
        for p in path.parent.iterdir():
            pid = p.name[len(prefix):]
            if p.name.startswith(prefix) and pid.isdigit() and not _running(int(pid)):
                _remove(p)
                stale.append(p)
    return stale


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def commit(tmp: Path, path: Path) -> None:
    """Move a finished ``tmp`` to ``path``; a directory replaces an older directory whole."""
    if tmp.is_dir() and path.is_dir():
        shutil.rmtree(path)
    os.replace(tmp, path)


def discard(tmp: Path) -> None:
    """Delete a partial output (nothing happens if it was never created)."""
    if tmp.exists() or tmp.is_symlink():
        _remove(tmp)


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield the temporary name to write ``path`` (a file or a directory) under.

    When the block finishes the temporary is renamed to ``path``; when it raises the temporary is
    deleted and the exception propagates. The parent directory is created first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_name(path)
    discard_stale(path)
    discard(tmp)  # left by a killed process that had the same pid
    try:
        yield tmp
    except BaseException:
        discard(tmp)
        raise
    commit(tmp, path)


@contextmanager
def scratch_dir(path: str | Path) -> Iterator[Path]:
    """A hidden working directory beside ``path`` (same naming, so the stale-partial cleanup
    covers it too), deleted when the block ends however it ends."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    discard_stale(path)
    tmp = partial_name(path)
    discard(tmp)
    tmp.mkdir()
    try:
        yield tmp
    finally:
        discard(tmp)


def write_text(path: str | Path, text: str) -> None:
    """Write a small text file (manifest, model descriptor) atomically, as UTF-8."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
