"""Atomic outputs: a stage's file (or directory) appears under its final name only when complete.

A stage that fails halfway must not leave a ``docs.parquet`` holding the rows read so far: run
from the command line nothing would delete it, and a later stage (or a person) would take it for
the corpus. So every writer works on a hidden sibling name and renames it in one step when its
block finishes; when the block raises, the partial file is deleted and an older complete output,
if any, is left untouched. The sibling is in the same directory, hence on the same filesystem,
where ``os.replace`` is atomic. Stages write their ``manifest.json`` last, so a manifest is the
sign that everything beside it is complete.

A full disk (or quota) met inside the block is a ``DiskFullError`` naming the output, its
partial removed; ``exits_on_full_disk`` makes a stage's ``main`` say it in one line, exit 2.

A process killed outright (SIGKILL, out of memory) cannot delete its partial file; the name
carries the host and process id, so the next writer of the same output removes partials of
processes of this host that no longer run (a live process's, or another host's on a shared
filesystem, are left alone).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

#: a full filesystem, and a full quota (a shared cluster disk's usual way of being full)
FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFullError(OSError):
    """No space left while writing an output: the message names it and says what to free."""

    def __init__(self, path: Path, cause: OSError):
        super().__init__(cause.errno, f"{path}: {cause.strerror or cause} while writing it (the "
                         f"partial output was removed, an older one kept): free space on its "
                         f"filesystem (df -h {path.parent}) or set results_dir to another disk")

    def __str__(self) -> str:
        return self.strerror


def exits_on_full_disk(main: Callable[..., int]) -> Callable[..., int]:
    """A stage's ``main`` that ends a full disk with one line naming the file (exit 2), not a
    stack: nothing is wrong with the code, only with the disk."""
    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except OSError as e:
            if e.errno not in FULL:
                raise
            what = str(e) if isinstance(e, DiskFullError) else \
                f"{e.filename or 'an output'}: {e.strerror} while writing it: free space on " \
                "its filesystem or set results_dir to another disk"
            print(f"error: {what}", file=sys.stderr)
            return 2
    return wrapped


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
    except OSError as e:
        discard(tmp)
        if e.errno in FULL and not isinstance(e, DiskFullError):   # the innermost output
            raise DiskFullError(path, e) from None
        raise
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
