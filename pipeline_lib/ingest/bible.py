"""The embedded default corpus: a Bible in two SWORD modules as verse-aligned chapter documents.

Config entry (``corpora.<name>``, reader ``bible``)::

    src_module: spaRV1909eb        # Reina-Valera 1909, KJV versification
    tgt_module: engWEB2015eb       # World English Bible, NRSVA versification
    dev_books: [Ruth, Jonah, Philippians, "1 John"]
    test_books: [Esther, Micah, Galatians, James]
    max_chapters: null             # keep only the first N training chapters (smoke runs)
    sword_dirs: [resources/sword]  # extra SWORD libraries searched before the system one
    max_length_ratio: 2.5          # verse pairs whose char lengths differ more are quarantined
    shift_min_correlation: 0.7     # see versification_shift below

Documents are chapters (``doc_id`` ``Gen.1``), sentences are verses. Both modules are read in
their own versification and keyed by OSIS reference (book, chapter, verse); a pair is kept when
both sides have text for the same reference. Everything else is a ``Rejected`` record, one per
reference, with one of these reasons:

``src_only_book`` / ``tgt_only_book``
    a book one module lacks (WEB's 14 deuterocanonical books);
``versification_shift``
    a chapter whose last verse number differs between the modules (RV1909 follows the Hebrew
    chapter breaks in places: Num 12:16 EN is Num 13:1 ES, Jonah 1:17 EN is Jonah 2:1 ES), so
    numbers do not correspond from the break on. The whole chapter is quarantined, and so is the
    next chapter of the same book when its verse lengths correlate less than
    ``shift_min_correlation`` between the sides (the spilled verse shifted its numbering too;
    where the extra verse was merged instead, the next chapter is intact and kept);
``src_only_verse`` / ``tgt_only_verse``
    a verse one side omits inside an otherwise matching chapter (Luke 17:36, Acts 8:37 …);
``length_ratio``
    a reference both sides have whose texts differ in length by more than ``max_length_ratio``
    (merged ranges: WEB's Rom 14:23 holds 14:23–26; the 1 Kgs 22:43–53 and 1 Chr 21:26–30
    numberings; RV1909's epistle subscriptions "Fué escrita á los Hebreos desde Italia …");
``too_long``
    either side longer than ``ingest.max_line_chars``.

So: kept + quarantined = references with text on at least one side, which the integration test
checks against a count made directly from the modules.

Provenance: ``origin_file`` is the source module's verse index file (``…/ot.bzv``) and
``origin_line`` the 1-based record number of the verse in it (stable, and what pysword and
libsword address). ``sent_idx`` is the position of the kept verse in its chapter.

Decompression: pysword re-inflates a whole compressed block (a book) for every verse it returns;
caching the last blocks cuts this from 6.8 ms to 0.01 ms per verse (bench/ingest_bible.py:
Genesis 10.4 s -> 0.012 s), so reading and cleaning a module takes ~1.4 s instead of minutes.
"""

from __future__ import annotations

import functools
import logging
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


from pipeline_lib.tables import Split
from pipeline_lib.ingest import InputError, Limits, SpecError
from pipeline_lib.ingest.osis import clean_osis, normalise_chapter_opening, usual_casing
from pipeline_lib.ingest.sword_modules import find_module, library_dirs, module_files
from pipeline_lib.tables import Rejected, Sentence

log = logging.getLogger("ingest.bible")

STAGE = "ingest_corpus"
# Cached decompressed blocks per module: BOOK blocks, read in order, so a few suffice.
_BLOCK_CACHE = 8


@dataclass(frozen=True)
class BibleSpec:
    """Typed view of the config entry (see module docstring)."""

    src_module: str
    tgt_module: str
    dev_books: tuple[str, ...] = ()
    test_books: tuple[str, ...] = ()
    max_chapters: int | None = None
    sword_dirs: tuple[str, ...] = ("resources/sword",)
    max_length_ratio: float = 2.5
    shift_min_correlation: float = 0.7

    @classmethod
    def from_dict(cls, spec: dict) -> "BibleSpec":
        if missing := [k for k in ("src_module", "tgt_module") if not spec.get(k)]:
            raise SpecError(f"reader 'bible' needs {missing}")
        return cls(
            src_module=spec["src_module"],
            tgt_module=spec["tgt_module"],
            dev_books=tuple(spec.get("dev_books") or ()),
            test_books=tuple(spec.get("test_books") or ()),
            max_chapters=spec.get("max_chapters"),
            sword_dirs=tuple(spec.get("sword_dirs") or cls.sword_dirs),
            max_length_ratio=float(spec.get("max_length_ratio", cls.max_length_ratio)),
            shift_min_correlation=float(spec.get("shift_min_correlation", cls.shift_min_correlation)),
        )


@dataclass(frozen=True)
class Verse:
    """One verse record of one module: OSIS reference, cleaned text, provenance."""

    book: str
    chapter: int
    verse: int
    text: str
    origin_file: str
    origin_line: int


@dataclass
class ModuleText:
    """All non-empty verses of a module: book order, and book -> chapter -> verse -> Verse."""

    name: str
    book_order: list[str]
    book_names: dict[str, tuple[str, ...]]
    verses: dict[str, dict[int, dict[int, Verse]]]


def _norm_book(name: str) -> str:
    return re.sub(r"\s+", "", name).lower()


def _locate(module: str, sword_dirs: tuple[str, ...]) -> Path:
    lib = find_module(module, library_dirs(list(sword_dirs)))
    if lib is None:
        raise InputError(module, None, "SWORD module not found in "
                         f"{[str(d) for d in library_dirs(list(sword_dirs))]}; run "
                         "`python -m pipeline_lib.ingest.sword_modules --ensure`")
    return lib


def read_module(module: str, sword_dirs: tuple[str, ...] = ("resources/sword",)) -> ModuleText:
    """Read and clean every verse of ``module`` in its own versification."""
    from pysword.modules import SwordModules   # lazily: planning the DAG must not need pysword

    lib = _locate(module, sword_dirs)
    mods = SwordModules(str(lib))
    mods.parse_modules()
    try:
        bible = mods.get_bible_from_module(module)
    except (KeyError, OSError, ValueError) as e:
        raise InputError(str(lib / "mods.d"), None, f"cannot open module {module}: {e}") from e
    # pysword's _decompressed_text re-inflates the whole block per verse; memoise per instance.
    bible._decompressed_text = functools.lru_cache(maxsize=_BLOCK_CACHE)(bible._decompressed_text)
    data_dir = Path(bible._module_path).resolve()
    structure = bible.get_structure()
    out = ModuleText(module, [], {}, {})
    for testament, books in structure.get_books().items():
        index_file = str(data_dir / f"{testament}.bzv")
        for book in books:
            offset = structure._book_offset(book.name)
            chapters: dict[int, dict[int, Verse]] = {}
            for c, n_verses in enumerate(book.chapter_lengths, start=1):
                first = offset + book.chapter_offset(c - 1)
                verses = {}
                for v in range(1, n_verses + 1):
                    idx = first + v - 1
                    try:
                        raw = bible._text_for_index(testament, idx)
                    except UnicodeDecodeError as e:
                        raise InputError(index_file, idx + 1, f"undecodable verse: {e}") from e
                    text = clean_osis(raw) if raw else ""
                    if text:
                        verses[v] = Verse(book.osis_name, c, v, text, index_file, idx + 1)
                if verses:
                    chapters[c] = verses
            if chapters:
                out.book_order.append(book.osis_name)
                out.book_names[book.osis_name] = (book.name, book.osis_name, book.preferred_abbreviation)
                out.verses[book.osis_name] = chapters
    return out


def _split_of(books: tuple[str, ...], names: dict[str, tuple[str, ...]]) -> set[str]:
    """OSIS names of the configured books; an unknown name is a config error."""
    index = {_norm_book(alias): osis for osis, aliases in names.items() for alias in aliases}
    unknown = [b for b in books if _norm_book(b) not in index]
    if unknown:
        raise SpecError(f"unknown book names {unknown}; use English names or OSIS ids, "
                         f"e.g. {sorted(index)[:6]}")
    return {index[_norm_book(b)] for b in books}


def _record(src: Verse | None, tgt: Verse | None) -> str:
    ref = src or tgt
    return (f"{ref.book}.{ref.chapter}.{ref.verse}\tsrc: {src.text if src else ''}"
            f"\ttgt: {tgt.text if tgt else ''}")


def _reject(corpus: str, reason: str, src: Verse | None, tgt: Verse | None) -> Rejected:
    ref = src or tgt
    return Rejected(STAGE, corpus, ref.origin_file, ref.origin_line, f"{ref.book}.{ref.chapter}",
                    reason, _record(src, tgt))


def _length_correlation(src: dict[int, Verse], tgt: dict[int, Verse]) -> float:
    """Pearson correlation of verse lengths over the verse numbers both chapters have.

    Translations of the same verse have strongly correlated lengths; when the numbering is off
    by one the correlation collapses (Jonah 2: -0.54, Job 39: -0.21) while aligned chapters
    that only had a merged verse at the end of the previous chapter stay high (Acts 20: 0.95).
    """
    common = sorted(set(src) & set(tgt))
    if len(common) < 3:
        return 0.0
    try:
        return statistics.correlation([len(src[v].text) for v in common],
                                      [len(tgt[v].text) for v in common])
    except statistics.StatisticsError:  # constant lengths: no evidence either way
        return 1.0


def _shifted_chapters(src: dict[int, dict[int, Verse]], tgt: dict[int, dict[int, Verse]],
                      min_correlation: float) -> set[int]:
    """Chapters whose last verse numbers differ, plus the following chapter where the break
    moved verses across it (its verse lengths no longer correlate)."""
    shifted = set()
    for c in set(src) & set(tgt):
        if max(src[c]) != max(tgt[c]):
            shifted.add(c)
            nxt = c + 1
            if nxt in src and nxt in tgt and _length_correlation(src[nxt], tgt[nxt]) < min_correlation:
                shifted.add(nxt)
    return shifted


def _length_ok(a: str, b: str, max_ratio: float) -> bool:
    la, lb = len(a), len(b)
    return max(la, lb) <= max_ratio * min(la, lb)


def align(corpus: str, src: ModuleText, tgt: ModuleText, spec: BibleSpec,
          limits: Limits = Limits()) -> Iterator[Sentence | Rejected]:
    """Pair the two modules verse by verse in source book order (see module docstring).

    ``limits.max_line_chars`` applies to both sides (reason ``too_long``).
    """
    dev = _split_of(spec.dev_books, src.book_names)
    test = _split_of(spec.test_books, src.book_names)
    if dev & test:
        raise SpecError(f"books in both dev and test: {sorted(dev & test)}")
    casing = usual_casing(v.text for chapters in src.verses.values()
                          for verses in chapters.values() for v in verses.values())
    train_chapters = 0
    recased = 0
    for book in src.book_order + [b for b in tgt.book_order if b not in src.verses]:
        s_book, t_book = src.verses.get(book, {}), tgt.verses.get(book, {})
        split = Split.DEV if book in dev else Split.TEST if book in test else Split.TRAIN
        shifted = _shifted_chapters(s_book, t_book, spec.shift_min_correlation)
        for c in sorted(set(s_book) | set(t_book)):
            s_ch, t_ch = s_book.get(c, {}), t_book.get(c, {})
            if split is Split.TRAIN and s_ch and t_ch:
                if spec.max_chapters is not None and train_chapters >= spec.max_chapters:
                    continue
                train_chapters += 1
            sent_idx = 0
            for v in sorted(set(s_ch) | set(t_ch)):
                s, t = s_ch.get(v), t_ch.get(v)
                if not s_book or not t_book:
                    yield _reject(corpus, "tgt_only_book" if t_book else "src_only_book", s, t)
                elif c in shifted:
                    yield _reject(corpus, "versification_shift", s, t)
                elif s is None or t is None:
                    yield _reject(corpus, "tgt_only_verse" if s is None else "src_only_verse", s, t)
                elif not _length_ok(s.text, t.text, spec.max_length_ratio):
                    yield _reject(corpus, "length_ratio", s, t)
                elif max(len(s.text), len(t.text)) > limits.max_line_chars:
                    yield _reject(corpus, "too_long", s, t)
                else:
                    src_text = s.text
                    if v == 1:
                        src_text, changed = normalise_chapter_opening(src_text, casing)
                        recased += changed
                    yield Sentence(corpus, split.value, f"{book}.{c}", sent_idx, src_text, [t.text],
                                   True, s.origin_file, s.origin_line)
                    sent_idx += 1
    log.info("%s: re-cased %d all-capital chapter openings", corpus, recased)


def read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]:
    """Reader entry point (pipeline_lib.ingest)."""
    cfg = BibleSpec.from_dict(spec)
    src = read_module(cfg.src_module, cfg.sword_dirs)
    tgt = read_module(cfg.tgt_module, cfg.sword_dirs)
    yield from align(corpus, src, tgt, cfg, limits)


def input_files(spec: dict) -> list[str]:
    """Both modules' conf files and data folders, so that a changed module reruns ingestion.

    A module not found yet yields no path: the rule then fails inside ``read`` with the
    message that says how to obtain it.
    """
    cfg = BibleSpec.from_dict(spec)
    dirs = library_dirs(list(cfg.sword_dirs))
    files = [module_files(m, dirs) for m in (cfg.src_module, cfg.tgt_module)]
    return [str(path) for pair in files if pair for path in pair]
