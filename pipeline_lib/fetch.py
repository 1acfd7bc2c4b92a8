"""Resumable HTTP download and safe archive extraction: what every stage that fetches (corpora,
SWORD modules, UD treebanks, stanza models) shares.

A download goes through ``<dest>.part`` and resumes with HTTP Range, retrying transient failures
with exponential backoff, so a flaky academic server costs retries, not restarts. Extraction
refuses any archive member that would land outside the target directory (absolute paths,
``..``, links pointing outside, device files) before writing anything.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A download that cannot complete; the message says what to do about it."""


class UnsafeArchiveError(ValueError):
    """An archive member that would be written outside the target directory."""


# --------------------------------------------------------------------------------------------
# resumable download
# --------------------------------------------------------------------------------------------

def _offline_hint(url: str, err: BaseException) -> str:
    reason = getattr(err, "reason", err)
    if isinstance(reason, (socket.gaierror, ConnectionRefusedError, TimeoutError, socket.timeout)):
        return (f"cannot reach {url} ({reason}); this machine looks offline. Download the file "
                "elsewhere, place it at the destination named below and rerun")
    return f"{url}: {err}"


def _expected_size(resp, offset: int) -> int | None:
    """Full file size announced by the server (Content-Range total, else offset + Length)."""
    content_range = resp.headers.get("Content-Range", "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = resp.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def fetch(url: str, dest: Path, retries: int = 5, backoff_s: float = 2.0,
          timeout_s: float = 60.0) -> int:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming with HTTP Range.

    Returns the number of HTTP requests made. Retries transient failures (connection errors,
    truncated bodies, 5xx) ``retries`` times with exponential backoff; 4xx fail at once.
    """
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    last: BaseException | None = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        have = part.stat().st_size if part.exists() else 0
        req = urllib.request.Request(url, headers={"User-Agent": "docmt-pipeline"})
        if have:
            req.add_header("Range", f"bytes={have}-")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                resumed = have and resp.status == 206
                total = _expected_size(resp, have if resumed else 0)
                with open(part, "ab" if resumed else "wb") as out:
                    while chunk := resp.read(CHUNK):
                        out.write(chunk)
            got = part.stat().st_size
            # http.client returns a short body silently when the server closes early
            if total is not None and got != total:
                raise http.client.IncompleteRead(b"", total - got)
            part.replace(dest)
            return attempt + 1
        except urllib.error.HTTPError as e:
            if e.code == 416 and have:   # the .part already holds everything
                part.replace(dest)
                return attempt + 1
            if e.code < 500:
                raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from e
            last = e
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
                TimeoutError, socket.timeout) as e:
            last = e
        print(f"download: {url}: attempt {attempt + 1}/{retries + 1} failed ({last})",
              file=sys.stderr)
    kept = f"; partial data kept in {part}, the next run resumes it" if part.exists() else ""
    raise DownloadError(f"{_offline_hint(url, last)}; gave up after {retries + 1} attempts "
                        f"(destination {dest}{kept})")


# --------------------------------------------------------------------------------------------
# safe extraction
# --------------------------------------------------------------------------------------------

def _within(target: Path, path: Path) -> bool:
    resolved = path.resolve()
    return resolved == target or target in resolved.parents


def _inside(target: Path, member: str) -> bool:
    if PurePosixPath(member).is_absolute() or member.startswith(("/", "\\")):
        return False
    return _within(target, target / member)


def check_members(archive: Path, target: Path) -> None:
    """Refuse the whole archive if any member would escape ``target`` (checked before writing)."""
    target = target.resolve()
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not _inside(target, info.filename):
                    raise UnsafeArchiveError(f"{archive}: member {info.filename!r} escapes "
                                             f"{target}; refused")
                # zipfile would write a link's target path as a file's content: refuse it
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a symbolic "
                                             "link; refused")
        return
    with tarfile.open(archive) as tf:
        for m in tf.getmembers():
            if not _inside(target, m.name):
                raise UnsafeArchiveError(f"{archive}: member {m.name!r} escapes {target}; refused")
            if m.issym() or m.islnk():
                # a symlink is relative to its own directory, a hard link to the archive root
                base = (target / m.name).parent if m.issym() else target
                if PurePosixPath(m.linkname).is_absolute() or not _within(target, base / m.linkname):
                    raise UnsafeArchiveError(f"{archive}: link {m.name!r} -> {m.linkname!r} "
                                             f"points outside {target}; refused")
            elif not (m.isfile() or m.isdir()):
                raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a device/fifo; refused")


def extract(archive: Path, target: Path) -> int:
    """Extract a tgz/zip into ``target`` atomically (temp dir + rename); returns member count."""
    check_members(archive, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
                n = len(zf.namelist())
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")  # the stdlib's own guard, after ours
                n = len(tf.getmembers())
        if target.exists():
            shutil.rmtree(target)
        tmp.replace(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return n


def is_archive(path: Path) -> bool:
    return zipfile.is_zipfile(path) or tarfile.is_tarfile(path)
