"""Corpus hygiene: the filters MT practitioners run on a parallel corpus before training, applied
by ``python -m pipeline_lib.ingest`` to the rows its reader kept, before ``docs.parquet`` is
written.

The filters follow OpusFilter (``remove_duplicates`` with its ``overlap`` option and
``letter_words_only``/``lowercase`` keys, ``LengthRatioFilter``, the language-identification
filters with py3langid, its default method) and Bicleaner's hard rules (``no_identical``:
letters compared without case and punctuation; ``length_ratio`` 3.0 in characters, UTF-8 bytes
for Chinese, Japanese and Korean). Each removed pair goes to the quarantine with stage
``hygiene`` and a ``HygieneReason``, and is counted per split in the manifest:

``duplicate_pair`` / ``duplicate_pair_normalised``
    a pair that occurred earlier in the same split, exactly / after normalisation (NFKC,
    case-folded, only letters and digits kept); the first occurrence stays;
``duplicate_document``
    a document of several sentences whose pairs equal, in order and normalised, those of an
    earlier document of the split: the later copy goes whole;
``source_copy``
    a reference equal to its source after normalisation (an untranslated line, a file given for
    both sides, ``<d>`` paired with ``<d>``);
``length_ratio``
    the longer side more than ``max_length_ratio`` times the shorter;
``wrong_language_src`` / ``wrong_language_tgt``
    py3langid identifies a side of at least ``langid_min_chars`` characters as another language
    and gives the configured one a probability below ``langid_min_prob`` (shorter text, lists
    of names, is not judged: language identification is unreliable there);
``overlap_dev`` / ``overlap_test``
    a pair or a whole document of a filtered split that is also in dev / test (normalised), so
    that no test sentence is trained on. A dev or test split found whole in train, or dev and
    test holding the same pairs, is an ``InputError``: removing the overlap would leave nothing
    to train on or score honestly, so the corpus entry itself must be wrong.

Only the splits in ``filter_splits`` (train and mono by default) lose rows: dev and test are
scored as released, so what the filters find there is counted under ``flagged`` and kept.

Documents: a pair removed from a document leaves it and the sentences after it move up, as for a
segment quarantined at reading, so a context model then sees the sentence before the gap as the
previous one. Bad pairs (copies, misalignments, wrong language, test overlap) are removed that
way. A repeated pair inside a document of several sentences is a good pair: removing it would
change the context of every sentence after it, so with ``duplicates: documents`` (the default)
only repeated documents and repeated pairs that stand alone (one-sentence documents, rows without
context) are removed, and repeats inside documents are counted (``kept_in_documents``);
``duplicates: pairs`` removes every repeat (OpusFilter's practice for sentence-level corpora),
``none`` none (not ``off``: YAML reads an unquoted off as false).

Memory does not grow with the corpus: the rows are read twice from the reader's Parquet output
in batches; repeats are found by hashing each key into bucket files on disk, one bucket
(``BUCKET_ROWS`` rows) sorted at a time, leaving one bit per row; only the keys of the
protected splits (dev, test) are held in memory (bench/hygiene_throughput.py).
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from pipeline_lib.ingest.reasons import HygieneReason
from pipeline_lib.tables import Split
from pipeline_lib.ingest import InputError, SpecError
from pipeline_lib.tables import Rejected, Sentence

log = logging.getLogger("ingest")

STAGE = "hygiene"
DUPLICATE_SCOPES = ("documents", "pairs", "none")
OVERLAP_MODES = ("remove", "keep")
CJK = {"zh", "ja", "ko"}           # lengths in UTF-8 bytes there (Bicleaner's length_ratio)
BUCKET_ROWS = 1 << 18              # rows sorted at once when looking for repeats (4 MiB of keys)
_KEY_ROW = np.dtype([("key", "<i8"), ("row", "<i8")])
BATCH_ROWS = 20_000                # rows read from Parquet at once
_NOT_ALNUM = re.compile(r"[\W_]+")
_PROTECTED = (Split.TEST.value, Split.DEV.value)   # test first: it wins when both hold a pair


@dataclass(frozen=True)
class HygieneConfig:
    """Config ``hygiene`` (the schema has each key's description), overridden per corpus by
    ``corpora.<name>.hygiene``."""

    enabled: bool = True
    filter_splits: tuple[str, ...] = ("train", "mono")
    duplicates: str = "documents"
    copies: bool = True
    max_length_ratio: float | None = 3.0
    langid: bool = True
    langid_min_prob: float = 0.01
    langid_min_chars: int = 40
    overlap: str = "remove"

    @classmethod
    def from_dicts(cls, *layers: dict | None) -> "HygieneConfig":
        """The defaults overridden by each layer in turn (the config section, then the corpus's
        own ``hygiene`` entry); an unknown key or value is a ``SpecError``."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for layer in layers:
            if not layer:
                continue
            if not isinstance(layer, dict):
                raise SpecError(f"hygiene must be a mapping, got {layer!r}")
            if unknown := sorted(set(layer) - known):
                raise SpecError(f"hygiene has no key(s) {unknown}; known: {sorted(known)}")
            values.update(layer)
        if "filter_splits" in values:
            values["filter_splits"] = tuple(values["filter_splits"])
        cfg = cls(**values)
        if cfg.duplicates not in DUPLICATE_SCOPES:
            raise SpecError(f"hygiene.duplicates must be one of {DUPLICATE_SCOPES}, "
                            f"got {cfg.duplicates!r}")
        if cfg.overlap not in OVERLAP_MODES:
            raise SpecError(f"hygiene.overlap must be one of {OVERLAP_MODES}, got {cfg.overlap!r}")
        return cfg


def normalise(text: str) -> str:
    """What two texts must share to count as the same: letters and digits, case-folded, after
    NFKC (OpusFilter's ``lowercase`` + ``letter_words_only``, Bicleaner's ``no_identical``)."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFKC", text).casefold())


def _length(text: str, lang: str) -> int:
    return len(text.encode("utf-8")) if lang in CJK else len(text)


class LanguageCheck:
    """py3langid (a maintained langid.py; ships its model) with probabilities normalised over
    its languages: a side is wrong when its top language is another one and the configured
    language gets less than ``min_prob`` (the full ranking is computed only then: most sides
    are in their language, and ranking 140 languages costs a third of an identification)."""

    def __init__(self, min_prob: float, min_chars: int):
        from importlib import metadata

        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self.identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.known = set(self.identifier.labels)
        self.min_prob, self.min_chars = min_prob, min_chars
        self.library = f"py3langid {metadata.version('py3langid')}"
        self.checked = self.short = 0

    def probability(self, text: str, lang: str) -> float:
        return dict(self.identifier.rank(text)).get(lang, 0.0)

    def wrong(self, text: str, lang: str) -> bool:
        if len(text) < self.min_chars:
            self.short += 1
            return False
        self.checked += 1
        return self.identifier.classify(text)[0] != lang and \
            self.probability(text, lang) < self.min_prob


class Repeats:
    """Which rows repeat a key first seen at an earlier row, in memory bounded by
    ``BUCKET_ROWS`` rather than by the corpus: keys go to bucket files by hash (appended, so
    that no more than one file is open at a time), and each bucket is sorted on its own (the
    first occurrence is the smallest row of its key)."""

    def __init__(self, work: Path, name: str, n_rows: int):
        self.n_rows = n_rows
        self.n_buckets = max(1, -(-n_rows // BUCKET_ROWS))
        self.paths = [work / f"{name}-{b}.bin" for b in range(self.n_buckets)]
        self.keys: list[int] = []
        self.rows: list[int] = []

    def add(self, key: int, row: int) -> None:
        self.keys.append(key)
        self.rows.append(row)
        if len(self.keys) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self.keys:
            return
        data = np.empty(len(self.keys), dtype=_KEY_ROW)
        data["key"], data["row"] = self.keys, self.rows
        bucket = data["key"].view("<u8") % self.n_buckets
        for b in np.unique(bucket):
            with open(self.paths[b], "ab") as f:
                data[bucket == b].tofile(f)
        self.keys.clear()
        self.rows.clear()

    def bitmap(self) -> np.ndarray:
        """One bit per row, set where the row repeats an earlier row's key."""
        self._flush()
        bits = np.zeros((self.n_rows + 7) // 8, dtype=np.uint8)
        for path in self.paths:
            if not path.exists():
                continue
            data = np.fromfile(path, dtype=_KEY_ROW)
            path.unlink()
            if len(data) < 2:
                continue
            data = data[np.lexsort((data["row"], data["key"]))]
            repeat = data["row"][1:][data["key"][1:] == data["key"][:-1]]
            del data
            np.bitwise_or.at(bits, repeat >> 3, (1 << (repeat & 7)).astype(np.uint8))
        return bits


def _bit(bits: np.ndarray, row: int) -> bool:
    return bool((bits[row >> 3] >> (row & 7)) & 1)


@dataclass
class _Row:
    """One row of the reader's output as the passes see it (keys are Python hashes: collisions
    between different texts are as unlikely as 64-bit hashes make them)."""

    index: int                  # position in the reader's output (what the bitmaps index)
    sentence: Sentence
    exact: int                  # the pair as written
    key: int                    # the pair normalised, split left out
    source: int                 # the source normalised
    refs: tuple[int, ...]       # (normalised source, one reference) per reference


def _documents(path: Path) -> Iterator[list[_Row]]:
    """The reader's rows, document by document (documents are contiguous in its output)."""
    import pyarrow.parquet as pq

    names = [f.name for f in fields(Sentence)]
    current: list[_Row] = []
    index = 0
    # pre_buffer off: pyarrow would otherwise hold every row group's chunks until the end
    for batch in pq.ParquetFile(str(path), pre_buffer=False).iter_batches(batch_size=BATCH_ROWS,
                                                                          columns=names):
        columns = [batch.column(n).to_pylist() for n in names]
        for values in zip(*columns):
            s = Sentence(*values)
            tgt = tuple(s.tgt or ())
            n_src = normalise(s.src)
            n_tgt = tuple(normalise(t) for t in tgt)
            row = _Row(index, s, hash((s.src, tgt)), hash((n_src, n_tgt)), hash(n_src),
                       tuple(hash((n_src, (t,))) for t in n_tgt))
            index += 1
            if current and (current[0].sentence.split, current[0].sentence.doc_id) != \
                    (s.split, s.doc_id):
                yield current
                current = []
            current.append(row)
    if current:
        yield current


def _nested(counter: Counter) -> dict:
    """(outer, inner) counts as {outer: {inner: n}}."""
    out: dict = defaultdict(dict)
    for (outer, inner), n in sorted(counter.items()):
        out[outer][inner] = n
    return dict(out)


def _overlap_reason(split: str) -> HygieneReason:
    return HygieneReason.OVERLAP_TEST if split == Split.TEST.value else HygieneReason.OVERLAP_DEV


class Hygiene:
    """The two passes over a reader's output (see the module docstring)."""

    def __init__(self, corpus: str, cfg: HygieneConfig, src_lang: str | None,
                 tgt_lang: str | None, work: Path):
        self.corpus, self.cfg, self.work = corpus, cfg, work
        self.langs = (src_lang, tgt_lang)
        self.lid: LanguageCheck | None = None
        self.lid_note = "off"
        if cfg.langid and src_lang and tgt_lang:
            self.lid = LanguageCheck(cfg.langid_min_prob, cfg.langid_min_chars)
            missing = [lang for lang in self.langs if lang not in self.lid.known]
            if missing:
                self.lid_note = f"skipped: {missing} not among the model's languages"
                self.lid = None
        elif cfg.langid:
            self.lid_note = "skipped: no src_lang/tgt_lang given"
        if self.lid is None and cfg.langid:    # said where a person sees it, not only the manifest
            log.warning("%s: language identification %s: a swapped or foreign-language split "
                        "goes unflagged", corpus, self.lid_note)
        # what dev and test hold: split -> (source, reference) keys -> their rows, sources,
        # documents (their sources in order), rows
        self.pairs: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.sources: dict[str, set[int]] = defaultdict(set)
        self.docs: dict[str, set[int]] = defaultdict(set)
        self.rows: Counter = Counter()
        self.found: dict[str, set[int]] = defaultdict(set)   # their rows met in another split
        self.removed: Counter = Counter()
        self.flagged: Counter = Counter()
        self.kept_in_docs: Counter = Counter()
        self.overlap: Counter = Counter()

    @property
    def strict(self) -> bool:
        """Whether overlap is removed (and a split found whole elsewhere is an error)."""
        return self.cfg.overlap == "remove"

    # --- pass 1 ---------------------------------------------------------------------------
    def collect(self, path: Path, n_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keys of dev and test, and the repeat bitmaps (exact pairs, normalised pairs,
        documents by their first row) of the filtered splits."""
        dup = self.cfg.duplicates != "none"
        exact, near, docs = (Repeats(self.work, name, n_rows) for name in ("exact", "near", "doc"))
        for doc in _documents(path):
            split = doc[0].sentence.split
            if split in _PROTECTED:
                self.docs[split].add(hash(tuple(r.source for r in doc)))
                self.rows[split] += len(doc)
                for r in doc:
                    self.sources[split].add(r.source)
                    for key in r.refs:
                        self.pairs[split][key].append(r.index)
            if split in self.cfg.filter_splits and dup:
                docs.add(hash((split, tuple(r.key for r in doc))), doc[0].index)
                for r in doc:
                    exact.add(hash((split, r.exact)), r.index)
                    near.add(hash((split, r.key)), r.index)
        return exact.bitmap(), near.bitmap(), docs.bitmap()

    def check_protected(self) -> None:
        """Dev and test must differ: the same pairs in both means one set is scored twice."""
        dev, test = self.pairs.get(Split.DEV.value), self.pairs.get(Split.TEST.value)
        if not (dev and test):
            return
        shared = len(dev.keys() & test.keys())
        if shared:
            self.overlap[("dev-test", "pairs")] = shared
            log.warning("%s: %d pairs of dev are also in test", self.corpus, shared)
        if self.strict and dev.keys() == test.keys():
            raise InputError(self.corpus, None, f"splits 'dev' and 'test' of corpus "
                             f"{self.corpus!r} hold the same {self.rows['dev']} / "
                             f"{self.rows['test']} pairs: the set that chose the model must not "
                             "be the one that scores it; give them different files")

    # --- per-pair filters -----------------------------------------------------------------
    def faults(self, s: Sentence) -> HygieneReason | None:
        """The first per-pair filter a row fails (copies, length ratio, language)."""
        cfg = self.cfg
        src_lang, tgt_lang = self.langs
        if s.tgt is not None:
            if cfg.copies:
                n_src = normalise(s.src)
                if any(normalise(t) == n_src for t in s.tgt):
                    return HygieneReason.COPY
            if cfg.max_length_ratio is not None:
                n = _length(s.src, src_lang or "")
                for t in s.tgt:
                    m = _length(t, tgt_lang or "")
                    if max(n, m) > cfg.max_length_ratio * max(min(n, m), 1):
                        return HygieneReason.LENGTH_RATIO
        if self.lid is not None:
            if self.lid.wrong(s.src, src_lang):
                return HygieneReason.WRONG_LANGUAGE_SRC
            if any(self.lid.wrong(t, tgt_lang) for t in s.tgt or ()):
                return HygieneReason.WRONG_LANGUAGE_TGT
        return None

    def _in_protected(self, r: _Row) -> str | None:
        """The held-out split (test before dev) holding this row of another split, counted per
        split pair; a pair of train counts by (source, reference), a row of mono by its source."""
        own = r.sentence.split
        mono = r.sentence.tgt is None
        for other in _PROTECTED:
            if other == own:
                continue
            if mono:
                hit = r.source in self.sources.get(other, ())
            else:
                rows = [i for key in r.refs for i in self.pairs.get(other, {}).get(key, ())]
                self.found[other].update(rows)
                hit = bool(rows)
            if hit:
                self.overlap[(f"{own}-{other}", "pairs")] += 1
                return other
        if not mono:
            for other in _PROTECTED:
                if other != own and r.source in self.sources.get(other, ()):
                    self.overlap[(f"{own}-{other}", "sources only")] += 1
                    break
        return None

    # --- pass 2 ---------------------------------------------------------------------------
    def decide(self, doc: list[_Row], bits: tuple[np.ndarray, ...]) -> list[HygieneReason | None]:
        """Per row of one document: why it is removed (or, in a split that is not filtered,
        flagged); None keeps it."""
        split = doc[0].sentence.split
        if split in _PROTECTED and split not in self.cfg.filter_splits:
            return [self.faults(r.sentence) for r in doc]
        filtered = split in self.cfg.filter_splits
        exact, near, repeated_docs = bits
        alone = len(doc) == 1 or not doc[0].sentence.has_context
        if filtered and self.cfg.duplicates != "none" and not alone and \
                _bit(repeated_docs, doc[0].index):
            return [HygieneReason.DUPLICATE_DOCUMENT] * len(doc)
        sources = hash(tuple(r.source for r in doc))
        for other in _PROTECTED:
            if other != split and sources in self.docs.get(other, ()):
                self.overlap[(f"{split}-{other}", "documents")] += 1
                for r in doc:
                    self._in_protected(r)
                if self.strict:
                    return [_overlap_reason(other)] * len(doc)
                return [self.faults(r.sentence) for r in doc]
        out: list[HygieneReason | None] = []
        for r in doc:
            reason = self.faults(r.sentence)
            other = self._in_protected(r)
            if reason is None and other is not None and self.strict:
                reason = _overlap_reason(other)
            if reason is None and filtered and self.cfg.duplicates != "none":
                repeat = (HygieneReason.DUPLICATE_PAIR if _bit(exact, r.index)
                          else HygieneReason.DUPLICATE_PAIR_NORMALISED if _bit(near, r.index)
                          else None)
                if repeat is not None and (alone or self.cfg.duplicates == "pairs"):
                    reason = repeat
                elif repeat is not None:
                    self.kept_in_docs[(repeat.value, split)] += 1
            out.append(reason)
        return out

    def check_found(self) -> None:
        """A dev or test split found whole in another split: the entry reads one set twice."""
        if not self.strict:
            return
        for split in _PROTECTED:
            n = self.rows[split]
            if n and len(self.found[split]) == n:
                raise InputError(self.corpus, None, f"every pair of split {split!r} of corpus "
                                 f"{self.corpus!r} ({n}) is also in its training data: the same "
                                 "files given for both? Held-out data must not be trained on; "
                                 "give the split its own files")


def clean(corpus: str, raw: Path, n_rows: int, cfg: HygieneConfig, langs: tuple[str, str] | None,
          work: Path, kept, bad, manifest) -> dict:
    """Filter the reader's rows in ``raw`` into ``kept`` (a doc writer), quarantining removals
    into ``bad`` and counting them in ``manifest``; returns the manifest's ``hygiene`` record.
    With ``cfg.enabled`` false every row is kept and the record says so."""
    started = time.time()
    src_lang, tgt_lang = langs or (None, None)
    h = Hygiene(corpus, cfg, src_lang, tgt_lang, work)
    bits = None
    if cfg.enabled:
        bits = h.collect(raw, n_rows)
        h.check_protected()
    for doc in _documents(raw):
        reasons = h.decide(doc, bits) if cfg.enabled else [None] * len(doc)
        split = doc[0].sentence.split
        removing = split in cfg.filter_splits
        idx = 0
        for r, reason in zip(doc, reasons):
            s = r.sentence
            if reason is not None and removing:
                h.removed[(reason.value, split)] += 1
                manifest.reject(reason.value)
                bad.write(Rejected(STAGE, corpus, s.origin_file, s.origin_line, s.doc_id,
                                   reason.value, " ||| ".join([s.src, *(s.tgt or [])])))
                continue
            if reason is not None:
                h.flagged[(reason.value, split)] += 1
            s.sent_idx = idx
            kept.write(s)
            idx += 1
    if cfg.enabled:
        h.check_found()
    record = {
        "settings": {**asdict(cfg), "filter_splits": list(cfg.filter_splits)},
        "removed": _nested(h.removed),
        "flagged": _nested(h.flagged),
        "kept_in_documents": _nested(h.kept_in_docs),
        "overlap": _nested(h.overlap),
        "langid": ({"library": h.lid.library, "checked": h.lid.checked,
                    "too_short": h.lid.short} if h.lid else {"note": h.lid_note}),
        "seconds": round(time.time() - started, 3),
    }
    if h.removed:
        log.info("%s: hygiene removed %s", corpus, record["removed"])
    if h.flagged:
        log.warning("%s: hygiene found in splits it does not filter (kept): %s", corpus,
                    record["flagged"])
    return record
