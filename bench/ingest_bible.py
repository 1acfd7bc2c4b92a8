"""Why pipeline_lib.ingest.bible caches decompressed blocks: time pysword with and without it.

    .venv/bin/python bench/ingest_bible.py [--module spaRV1909eb] [--book Genesis]
        [--sword-dir resources/sword] [--smoke]

pysword's ``_decompressed_text`` re-inflates the whole compressed block (a book, for these
modules) for every verse; the reader wraps it in an ``lru_cache``. Also times the full reader.
Modules are looked up as the reader does: ``--sword-dir`` first, then $SWORD_PATH, the system
library and ~/.sword. ``--smoke`` (CI): the shortest book timed (Obadiah; the full reader still
reads the whole module, a few seconds); flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import functools
import time

from pysword.modules import SwordModules

from pipeline_lib.ingest.bible import read_module
from pipeline_lib.ingest.sword_modules import find_module, library_dirs


def _time_book(module: str, book: str, cached: bool, sword_dirs: list[str]) -> tuple[float, int]:
    mods = SwordModules(str(find_module(module, library_dirs(sword_dirs))))
    mods.parse_modules()
    bible = mods.get_bible_from_module(module)
    if cached:
        bible._decompressed_text = functools.lru_cache(maxsize=8)(bible._decompressed_text)
    t0 = time.perf_counter()
    n = sum(1 for _ in bible.get_iter(books=[book], clean=False))
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--module", default="spaRV1909eb")
    ap.add_argument("--book", default="Genesis")
    ap.add_argument("--sword-dir", action="append", default=None,
                    help="SWORD library searched first (repeatable; default resources/sword)")
    ap.add_argument("--smoke", action="store_true", help="smallest real run (CI): --book Obadiah")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(book="Obadiah")
    args = ap.parse_args()
    sword_dirs = args.sword_dir or ["resources/sword"]
    for cached in (False, True):
        secs, n = _time_book(args.module, args.book, cached, sword_dirs)
        print(f"{args.module} {args.book}: {n} verses, block cache {'on ' if cached else 'off'}: "
              f"{secs:.3f} s ({1000 * secs / n:.2f} ms/verse)")
    t0 = time.perf_counter()
    text = read_module(args.module, tuple(sword_dirs))
    n = sum(len(v) for ch in text.verses.values() for v in ch.values())
    print(f"read_module({args.module}): {n} verses cleaned in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
