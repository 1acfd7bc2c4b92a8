"""Public document-level MT corpora: pinned catalogue, resumable verified download, safe extraction.

WHY this shape: the seed papers' corpora live on a handful of academic servers that are slow,
flaky and occasionally change a file in place. So every entry names its real URL and a checksum;
a download resumes where it broke off (HTTP Range) with retries and backoff; and nothing is
extracted until the bytes match. Where no checksum has ever been published, the first download is
refused unless the user says ``--trust-first-download``; the SHA-256 it saw is then written to a
lock file and every later download (on any machine using that lock) must match it.

Checksums: the MD5s below are the ones sacreBLEU pins for the same URLs
(sacrebleu/dataset/__init__.py, DATASETS: iwslt17/tst2015 and wmt14/full, wmt16, wmt17, wmt19).
No SHA-256 of these archives is published anywhere we could find, hence ``sha256=None`` everywhere:
the MD5 is verified and the SHA-256 of the verified bytes is recorded in the lock.

LDC corpora (Zhang et al. 2018 Zh-En) are licensed and cannot be downloaded: ``check_ldc`` verifies
that the configured local directories exist and lists every missing one at once.

Downloading and extracting are pipeline_lib/fetch.py's (the parse stage fetches UD treebanks
with them too).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline_lib import stage_options
from pipeline_lib.stage_options import json_value
from pipeline_lib.fetch import CHUNK, DownloadError, UnsafeArchiveError, extract, fetch, is_archive
from pipeline_lib.manifest import Manifest

DOWNLOADS_DIR = "downloads"       # under resources/: raw archives (+ .part while in flight)
CORPORA_DIR = "corpora"           # under resources/: one extracted directory per catalogue entry
LOCK_FILE = "downloads.lock.json"  # under resources/downloads/: sha256 seen on trusted first use


@dataclass(frozen=True)
class Source:
    """One downloadable file of the catalogue."""

    url: str
    sha256: str | None = None
    md5: str | None = None       # a published MD5 (sacreBLEU) when no SHA-256 exists
    note: str = ""


@dataclass(frozen=True)
class Entry:
    name: str
    description: str
    sources: tuple[Source, ...]
    license: str


_WIT3 = "https://raw.githubusercontent.com/hlt-mt/WIT3/master/archive"
# Maruf et al. (2019) document splits, committed to the paper's repository (dev/test per corpus).
_MARUF_COMMIT = "1cb44c5ddd2cdf4f32ea74768a3389b52fc4db27"

CATALOGUE: dict[str, Entry] = {e.name: e for e in [
    Entry("iwslt17_en_de",
          "IWSLT 2017 TED En-De (train, tst2010-2015 as XML), WIT3 release 2017-01-trnted",
          (Source(f"{_WIT3}/2017-01-trnted/texts/en/de/en-de.tgz",
                  md5="d8a32cfc002a4f12b17429cfa78050e6"),), "CC BY-NC-ND 4.0 (TED)"),
    Entry("iwslt17_zh_en", "IWSLT 2017 TED Zh-En, WIT3 release 2017-01-trnted",
          (Source(f"{_WIT3}/2017-01-trnted/texts/zh/en/zh-en.tgz",
                  md5="1c0ae40171d52593df8a6963d3828116"),), "CC BY-NC-ND 4.0 (TED)"),
    Entry("iwslt15_zh_en",
          "IWSLT 2015 TED Zh-En (the TED domain of Tu et al. 2018), WIT3 release 2015-01",
          (Source(f"{_WIT3}/2015-01/texts/zh/en/zh-en.tgz",
                  note="no published checksum; use --trust-first-download"),),
          "CC BY-NC-ND 4.0 (TED)"),
    Entry("iwslt14_es_en",
          "IWSLT 2014 TED Es-En (Jiang et al. 2019 TED setting), WIT3 release 2014-01",
          (Source(f"{_WIT3}/2014-01/texts/es/en/es-en.tgz",
                  note="no published checksum; use --trust-first-download"),),
          "CC BY-NC-ND 4.0 (TED)"),
    Entry("news_commentary_v11", "News Commentary v11 parallel data (WMT16), incl. de-en",
          (Source("https://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
                  note="no published checksum; use --trust-first-download"),), "research use"),
    Entry("europarl_v7_de_en", "Europarl v7 German-English (Koehn 2005)",
          (Source("https://www.statmt.org/europarl/v7/de-en.tgz",
                  note="no published checksum; use --trust-first-download"),), "research use"),
    # Sentence pairs for cross-task pre-training "with resources" (Chen et al. 2021): the WMT14
    # En-De training set (~4.5M pairs) as fairseq's prepare-wmt14en2de.sh and tfds's wmt14 read
    # it; each archive is extracted into a folder named after it (training/..., commoncrawl...).
    Entry("wmt14_en_de_train",
          "WMT14 En-De training data: Europarl v7, Common Crawl, News Commentary v9 (~4.5M pairs)",
          (Source("https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
                  note="no published checksum; use --trust-first-download"),
           Source("https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
                  note="no published checksum; use --trust-first-download"),
           Source("https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
                  note="no published checksum; use --trust-first-download")),
          "research use"),
    Entry("maruf2019_doc_splits",
          "Document-level splits of TED, News, Europarl (Maruf et al. 2019), pinned commit: "
          "dev/test of all three, train of TED and News (Europarl's train is sent on request)",
          (Source(f"https://github.com/sameenmaruf/selective-attn/archive/{_MARUF_COMMIT}.zip",
                  note="GitHub archives are not byte-stable across time; pinned by lock"),),
          "see repository"),
    Entry("wmt14_test_full", "WMT14 newstest2014 (full) SGML test sets",
          (Source("https://statmt.org/wmt14/test-full.tgz", md5="a8cd784e006feb32ac6f3d9ec7eb389a"),),
          "research use"),
    Entry("wmt16_test", "WMT16 test sets (newstest2016)",
          (Source("https://data.statmt.org/wmt16/translation-task/test.tgz",
                  md5="3d809cd0c2c86adb2c67034d15c4e446"),), "research use"),
    Entry("wmt17_test", "WMT17 test sets (newstest2017)",
          (Source("https://data.statmt.org/wmt17/translation-task/test.tgz",
                  md5="86a1724c276004aa25455ae2a04cef26"),), "research use"),
    Entry("wmt19_test", "WMT19 test sets (newstest2019, with document ids)",
          (Source("https://data.statmt.org/wmt19/translation-task/test.tgz",
                  md5="84de7162d158e28403103b01aeefc39a"),), "research use"),
    Entry("voita2019_en_ru", "Voita et al. (2019) En-Ru context-aware data + contrastive suites",
          (Source("https://www.dropbox.com/s/5drjpx07541eqst/"
                  "acl19_good_translation_wrong_in_context.zip?dl=1",
                  note="no published checksum; use --trust-first-download"),
           Source("https://github.com/lena-voita/good-translation-wrong-in-context/archive/"
                  "refs/heads/master.zip",
                  note="contrastive test sets (deixis, lex_cohesion, ellipsis); branch archive")),
          "CC BY 4.0 / see repository"),
    Entry("contrapro", "ContraPro En-De pronoun test suite (Mueller et al. 2018); the suite's "
          "own scripts then extract the contexts from OpenSubtitles2018",
          (Source("https://github.com/ZurichNLP/ContraPro/archive/refs/heads/master.zip",
                  note="branch archive; pinned by lock"),), "see repository"),
]}

# Licensed LDC corpora of Zhang et al. (2018) Zh-En, footnote 3: sentence-level and
# document-level training releases; and the NIST MT test sets (Sec. 3.1).
ZHANG2018_SENT = ("LDC2002E18", "LDC2003E07", "LDC2003E14", "LDC2004T08")
ZHANG2018_DOC = ("LDC2002T01", "LDC2004T07", "LDC2005T06", "LDC2005T10", "LDC2009T02",
                 "LDC2009T15", "LDC2010T03")
NIST_SETS = ("MT02", "MT03", "MT04", "MT05", "MT06", "MT08")


# --------------------------------------------------------------------------------------------
# checksums and the lock
# --------------------------------------------------------------------------------------------

def file_digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) of a file, read once."""
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
            md5.update(chunk)
    return sha.hexdigest(), md5.hexdigest()


def read_lock(path: Path) -> dict[str, str]:
    return json.loads(path.read_text()) if path.exists() else {}


def record_in_lock(path: Path, url: str, sha256: str) -> None:
    """Add one pin; WHY the flock: parallel download_corpus jobs share the lock file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".flock"), "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        lock = read_lock(path)
        lock[url] = sha256
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
        tmp.replace(path)


def verify(path: Path, source: Source, lock: dict[str, str], trust_first: bool) -> str:
    """Check a downloaded file; return its sha256. Raises DownloadError on mismatch/no pin."""
    sha, md5 = file_digests(path)
    pinned = source.sha256 or lock.get(source.url)
    if pinned:
        if sha != pinned:
            raise DownloadError(f"{source.url}: sha256 {sha} does not match the pinned {pinned} "
                                f"({path} kept for inspection; delete it to download again)")
    elif source.md5:
        if md5 != source.md5:
            raise DownloadError(f"{source.url}: md5 {md5} does not match the published "
                                f"{source.md5} "
                                f"({path} kept for inspection; delete it to download again)")
    elif not trust_first:
        raise DownloadError(f"{source.url}: no published checksum and none in the lock; rerun with "
                            "--trust-first-download to accept these bytes and record their sha256")
    return sha


# --------------------------------------------------------------------------------------------
# one catalogue entry end to end
# --------------------------------------------------------------------------------------------

def file_name(url: str) -> str:
    return url.split("?")[0].rstrip("/").split("/")[-1]


def acquire(entry: Entry, resources: Path, trust_first: bool = False, retries: int = 5,
            backoff_s: float = 2.0, timeout_s: float = 60.0,
            url_prefix_map: dict[str, str] | None = None) -> Manifest:
    """Download, verify and extract every source of ``entry`` under ``resources``.

    ``url_prefix_map`` rewrites URL prefixes (a local mirror; the tests' 127.0.0.1 server) while
    checksums and the lock stay keyed by the catalogue URL.
    """
    resources = Path(resources)
    downloads = resources / DOWNLOADS_DIR / entry.name
    lock_path = resources / DOWNLOADS_DIR / LOCK_FILE
    out_dir = resources / CORPORA_DIR / entry.name
    manifest = Manifest(stage="download_corpus", params={"entry": entry.name})
    lock = read_lock(lock_path)
    for source in entry.sources:
        url = source.url
        for prefix, mirror in (url_prefix_map or {}).items():
            if url.startswith(prefix):
                url = mirror + url[len(prefix):]
        dest = downloads / file_name(source.url)
        requests = 0
        if not dest.exists():
            requests = fetch(url, dest, retries=retries, backoff_s=backoff_s, timeout_s=timeout_s)
        sha = verify(dest, source, lock, trust_first)
        if source.url not in lock and not source.sha256:
            record_in_lock(lock_path, source.url, sha)
        members = extract(dest, out_dir / Path(file_name(source.url)).stem) if is_archive(dest) \
            else 0
        counts = manifest.counts
        counts["files"] = counts.get("files", 0) + 1
        counts["http_requests"] = counts.get("http_requests", 0) + requests
        counts["archive_members"] = counts.get("archive_members", 0) + members
        manifest.inputs[source.url] = sha
    manifest.write(out_dir / "manifest.json")
    return manifest


# --------------------------------------------------------------------------------------------
# LDC
# --------------------------------------------------------------------------------------------

def check_ldc(directories: dict[str, str | None], required: list[str]) -> None:
    """Raise one error that lists every required LDC/NIST corpus whose directory is missing."""
    missing = []
    for corpus in required:
        path = directories.get(corpus)
        if not path:
            missing.append(f"{corpus}: no directory configured (downloads.ldc.{corpus})")
        elif not Path(path).is_dir():
            missing.append(f"{corpus}: {path} is not a directory")
    if missing:
        raise DownloadError(
            "licensed LDC/NIST corpora are missing (they cannot be downloaded; obtain them from "
            "https://catalog.ldc.upenn.edu and set their directories in config):\n  "
            + "\n  ".join(missing))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    get = sub.add_parser("get", help="download + verify + extract catalogue entries")
    get.add_argument("--name", action="append", required=True, choices=sorted(CATALOGUE))
    get.add_argument("--resources", type=Path, required=True)
    get.add_argument("--trust-first-download", action="store_true")
    get.add_argument("--retries", type=int, default=5)
    get.add_argument("--backoff-s", type=float, default=2.0)
    get.add_argument("--timeout-s", type=float, default=60.0)
    get.add_argument("--mirror", action="append", default=[], metavar="PREFIX=MIRROR",
                     help="fetch URLs starting with PREFIX from MIRROR instead")
    ldc = sub.add_parser("check-ldc", help="verify the local directories of licensed corpora")
    ldc.add_argument("--dirs", required=True, type=json_value, help="JSON object: corpus id -> directory")
    ldc.add_argument("--required", nargs="+", required=True)
    ldc.add_argument("--manifest", type=Path, help="write a manifest here when all are present")
    sub.add_parser("list", help="print the catalogue")
    args = stage_options.parse_args(ap, argv)
    try:
        if args.cmd == "list":
            for e in CATALOGUE.values():
                print(f"{e.name:24} {e.description}")
                for s in e.sources:
                    print(f"{'':24}   {s.url}  sha256={s.sha256} md5={s.md5}")
        elif args.cmd == "check-ldc":
            dirs = args.dirs
            check_ldc(dirs, args.required)
            if args.manifest:
                m = Manifest(stage="check_ldc", params={"required": args.required})
                m.counts["corpora"] = len(args.required)
                m.extra["directories"] = {c: dirs[c] for c in args.required}
                m.write(args.manifest)
        else:
            mirrors = dict(m.split("=", 1) for m in args.mirror)
            for name in args.name:
                acquire(CATALOGUE[name], args.resources, args.trust_first_download, args.retries,
                        args.backoff_s, args.timeout_s, mirrors)
    except (DownloadError, UnsafeArchiveError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
