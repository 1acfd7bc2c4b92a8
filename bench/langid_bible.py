"""Accuracy of the hygiene pass's language check (py3langid, pipeline_lib.ingest.hygiene) on the
Bible's verse pairs: the Spanish side (Reina-Valera 1909) and the English side (World English
Bible) of every pair the reader keeps, read with the hygiene pass off.

Printed: py3langid's top-1 accuracy per side over its 140 languages; the filter's decision
(another language on top and the configured one below ``langid_min_prob``, on a side of at
least ``langid_min_chars`` characters): sides wrongly judged and pairs wrongly removed; and, with the
sides swapped (English text where Spanish is expected and the reverse, as in a corpus whose
files were given the wrong way round), the share of wrong-language sides it catches. Last line:
the pairs wrongly removed, the comparable figure.

    .venv/bin/python bench/langid_bible.py [--docs results/ingest_corpus/bible/docs.parquet]
        [--quarantine FILE] [--pairs N] [--smoke]

``--pairs N`` judges the first N pairs only (0, the default: all); ``--smoke`` (CI) is
``--pairs 200``; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import pyarrow.parquet as pq

from pipeline_lib.ingest.hygiene import HygieneConfig, LanguageCheck

BIBLE = ROOT / "results" / "ingest_corpus" / "bible" / "docs.parquet"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=Path, default=BIBLE,
                    help="the Bible's docs.parquet (what its hygiene pass removed is put back)")
    ap.add_argument("--quarantine", type=Path, default=None,
                    help="quarantine.parquet beside --docs (default: the one beside it)")
    ap.add_argument("--pairs", type=int, default=0, help="judge the first N pairs (0: all)")
    ap.add_argument("--smoke", action="store_true", help="smallest real run (CI): --pairs 200")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(pairs=200)
    args = ap.parse_args()
    cfg = HygieneConfig()
    rows = [(r["src"], r["tgt"][0]) for r in pq.read_table(args.docs, columns=["src", "tgt"]).to_pylist()]
    quarantine = args.quarantine or args.docs.with_name("quarantine.parquet")
    if quarantine.is_file():   # pairs the hygiene pass removed are read pairs too
        for r in pq.read_table(quarantine).to_pylist():
            if r["stage"] == "hygiene" and r["record"].count(" ||| ") == 1:
                src, tgt = r["record"].split(" ||| ")
                rows.append((src, tgt))
    if args.pairs:
        rows = rows[:args.pairs]
    check = LanguageCheck(cfg.langid_min_prob, cfg.langid_min_chars)
    t0 = time.process_time()
    top = {"es": 0, "en": 0}
    wrong = {"es": 0, "en": 0}
    caught = {"es": 0, "en": 0}
    removed = 0
    for src, tgt in rows:
        top["es"] += check.identifier.classify(src)[0] == "es"
        top["en"] += check.identifier.classify(tgt)[0] == "en"
        w_src, w_tgt = check.wrong(src, "es"), check.wrong(tgt, "en")
        wrong["es"] += w_src
        wrong["en"] += w_tgt
        removed += w_src or w_tgt
        caught["es"] += check.wrong(tgt, "es")    # English where Spanish is expected
        caught["en"] += check.wrong(src, "en")
    n = len(rows)
    cpu = time.process_time() - t0
    print(f"{check.library}; {n} Bible verse pairs; {cpu:.1f} s CPU")
    for lang, side in (("es", "Spanish (source)"), ("en", "English (target)")):
        print(f"{side}: top-1 {100 * top[lang] / n:.2f}%; judged wrong by the filter "
              f"{wrong[lang]} ({100 * wrong[lang] / n:.3f}%); swapped sides caught "
              f"{100 * caught[lang] / n:.2f}%")
    print(f"sides shorter than {cfg.langid_min_chars} characters are not judged: "
          f"{check.short} of {check.short + check.checked}")
    print(f"langid_bible: {removed} of {n} pairs ({100 * removed / n:.3f}%) wrongly removed "
          f"(langid_min_prob {cfg.langid_min_prob}, langid_min_chars {cfg.langid_min_chars})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
