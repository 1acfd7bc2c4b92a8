"""``python -m pipeline_lib.preprocess.pretokenize``: the papers' word segmentation and casing
before BPE (issue 37, item 1), per language (config ``tokenize``), and its inverse after
decoding.

The papers learn BPE on tokenized text: Moses ``tokenizer.perl`` and ``truecase.perl`` (Jiang et
al. 2019 Sec. 5.2, Chen et al. 2021 Sec. 4.1 fn. 7), lowercased English (Chen, Zh-En), jieba for
Chinese (Jiang Sec. 5.2, Chen Sec. 4.1), KyTea for Japanese (Deguchi et al. 2019 Sec. 4.1).
Steps, applied in this order to every sentence of a side in that language:

- one segmenter: ``moses`` (sacremoses, a port of tokenizer.perl: no escaping of ``&<>'"``, no
  aggressive hyphen splitting), ``jieba`` (Chinese, its default dictionary, HMM on) or ``mecab``
  (Japanese: fugashi with unidic-lite, a packaged MeCab dictionary; a departure from KyTea, which
  has no maintained Python package);
- then ``truecase`` (Moses' truecaser, trained on the run's BPE text of that language after
  segmentation: ``train``) or ``lowercase``.

``detokenizer`` undoes what can be undone on a hypothesis: Moses detokenization and detruecasing
(the first letter of the sentence capitalised), spaces removed between Chinese or Japanese
characters; lowercasing cannot be undone, so a lowercased target is scored lowercased (the
presets that lowercase set ``score.lowercase``). The default run tokenizes nothing.

Sub-commands: ``train`` (a truecaser from document Parquet files), ``apply`` (document Parquet
-> document Parquet, each side by its language's steps, with a manifest counting the rows).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline_lib import stage_options
from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.manifest import Manifest
from pipeline_lib.stage_options import json_value

log = logging.getLogger("pretokenize")

SEGMENTERS = ("moses", "jieba", "mecab")
CASINGS = ("truecase", "lowercase")
#: Han, kana and CJK punctuation: text written without spaces, whose spaces detokenize removes
_UNSPACED = r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff01-\uff65]"
_SPACE_BETWEEN = re.compile(rf"(?<={_UNSPACED}) +(?={_UNSPACED})")


def check_steps(lang: str, steps: list[str]) -> None:
    """At most one segmenter, first; then at most one casing; truecasing needs Moses tokens."""
    known = SEGMENTERS + CASINGS
    if unknown := [s for s in steps if s not in known]:
        raise ValueError(f"tokenize.{lang}: unknown step(s) {unknown}; known: {list(known)}")
    segs = [s for s in steps if s in SEGMENTERS]
    cases = [s for s in steps if s in CASINGS]
    if len(segs) > 1 or len(cases) > 1 or steps != segs + cases:
        raise ValueError(f"tokenize.{lang}: {steps}: at most one segmenter {SEGMENTERS}, then at "
                         f"most one of {CASINGS}")
    if "truecase" in cases and segs != ["moses"]:
        raise ValueError(f"tokenize.{lang}: truecase needs moses tokens (truecase.perl's input)")


def _segmenter(lang: str, step: str, package: str):
    """The segmenter's package, or one line saying how to install it (the `tokenize` extra)."""
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        raise ValueError(f"tokenize.{lang}: {step} needs the package {package}, not installed: "
                         "pip install -e '.[tokenize]'") from None


@dataclass(frozen=True)
class Pretokenizer:
    """One language's steps; ``truecaser`` is the trained model where ``truecase`` is one."""

    lang: str
    steps: tuple[str, ...]
    truecaser: Path | None = None

    def __post_init__(self) -> None:
        check_steps(self.lang, list(self.steps))
        if ("truecase" in self.steps) != (self.truecaser is not None):
            raise ValueError(f"tokenize.{self.lang}: a truecaser model is needed exactly when "
                             "truecase is a step")

    @cached_property
    def segment(self) -> Callable[[str], str]:
        if "moses" in self.steps:
            from sacremoses import MosesTokenizer

            moses = MosesTokenizer(lang=self.lang)
            return lambda line: moses.tokenize(line, escape=False, return_str=True)
        if "jieba" in self.steps:
            jieba = _segmenter(self.lang, "jieba", "jieba")
            jieba.setLogLevel(logging.WARNING)
            return lambda line: " ".join(w for w in jieba.cut(line) if w.strip())
        if "mecab" in self.steps:
            tagger = _segmenter(self.lang, "mecab", "fugashi").Tagger()   # unidic-lite's
            return lambda line: " ".join(w.surface for w in tagger(line))
        return lambda line: line

    @cached_property
    def case(self) -> Callable[[str], str]:
        if "truecase" in self.steps:
            from sacremoses import MosesTruecaser

            truecaser = MosesTruecaser(load_from=str(self.truecaser))
            return lambda line: truecaser.truecase(line, return_str=True)
        if "lowercase" in self.steps:
            return str.lower
        return lambda line: line

    def __call__(self, line: str) -> str:
        return self.case(self.segment(line))


def detokenizer(lang: str, steps: list[str]) -> Callable[[str], str]:
    """A hypothesis of a model trained on ``steps`` as running text, as far as they can be
    undone (decode_test and translate apply it; no model is needed)."""
    check_steps(lang, steps)
    if "moses" in steps:
        from sacremoses import MosesDetokenizer, MosesDetruecaser

        moses, detrue = MosesDetokenizer(lang=lang), MosesDetruecaser()
        if "truecase" in steps:
            return lambda line: moses.detokenize(
                detrue.detruecase(line, return_str=True).split(), unescape=False)
        return lambda line: moses.detokenize(line.split(), unescape=False)
    if "jieba" in steps or "mecab" in steps:
        return lambda line: _SPACE_BETWEEN.sub("", line)
    return lambda line: line


def pretokenizers(spec: dict, langs: tuple[str, str],
                  truecasers: dict[str, Path] | None = None) -> tuple[Pretokenizer, Pretokenizer]:
    """Source and target pretokenizers from config ``tokenize`` (language -> steps)."""
    truecasers = truecasers or {}
    return tuple(Pretokenizer(lang, tuple(spec.get(lang) or ()),
                              truecasers.get(lang) if "truecase" in (spec.get(lang) or ()) else None)
                 for lang in langs)


def train_truecaser(texts: Iterable[str], segmenter: Pretokenizer, out: Path) -> int:
    """Moses' truecaser from ``texts`` segmented as the run segments them; returns sentences."""
    from sacremoses import MosesTruecaser

    tokens = [segmenter.segment(t).split() for t in texts if t and t.strip()]
    if not tokens:
        raise ValueError(f"{out}: no sentence to train a truecaser on")
    with atomic_output(out) as tmp:
        MosesTruecaser().train(tokens, save_to=str(tmp))
    return len(tokens)


def _side_texts(docs: list[Path], side: str, splits: set[str]) -> Iterable[str]:
    for path in docs:
        table = pq.read_table(path, columns=["split", side]).to_pydict()
        for split, value in zip(table["split"], table[side]):
            if split in splits:
                yield from (value if isinstance(value, list) else [value])


def apply(docs: Path, out: Path, src: Pretokenizer, tgt: Pretokenizer) -> dict:
    """``docs`` with each source sentence and every reference tokenized by its side's steps."""
    table = pq.read_table(docs)
    src_col = [src(t) for t in table.column("src").to_pylist()]
    tgt_col = [None if refs is None else [tgt(r) for r in refs]
               for refs in table.column("tgt").to_pylist()]
    table = table.set_column(table.schema.get_field_index("src"), "src",
                             pa.array(src_col, table.schema.field("src").type))
    table = table.set_column(table.schema.get_field_index("tgt"), "tgt",
                             pa.array(tgt_col, table.schema.field("tgt").type))
    with atomic_output(out) as tmp:
        pq.write_table(table, tmp)
    return {"rows": table.num_rows, "references": sum(len(r) for r in tgt_col if r)}


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="a truecaser for one language")
    tr.add_argument("--docs", nargs="+", required=True, type=Path, help="document Parquet files")
    tr.add_argument("--side", choices=["src", "tgt"], required=True)
    tr.add_argument("--lang", required=True)
    tr.add_argument("--steps", type=json_value, required=True, help="the language's steps (JSON)")
    tr.add_argument("--splits", nargs="+", default=["train", "mono"])
    tr.add_argument("--out", required=True, type=Path)
    ap_ = sub.add_parser("apply", help="tokenize a corpus's documents")
    ap_.add_argument("--docs", required=True, type=Path)
    ap_.add_argument("--langs", nargs=2, required=True, metavar=("SRC", "TGT"))
    ap_.add_argument("--tokenize", type=json_value, required=True,
                     help="config tokenize (language -> steps) as JSON")
    ap_.add_argument("--truecaser", nargs=2, action="append", default=[], metavar=("LANG", "MODEL"))
    ap_.add_argument("--out-dir", required=True, type=Path)
    args = stage_options.parse_args(ap, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        if args.command == "train":
            segmenter = Pretokenizer(args.lang, tuple(s for s in args.steps if s in SEGMENTERS))
            n = train_truecaser(_side_texts(args.docs, args.side, set(args.splits)), segmenter,
                                args.out)
            manifest = Manifest(stage="train_truecaser", params={"lang": args.lang})
            for d in args.docs:
                manifest.add_input(d)
            manifest.counts = {"sentences": n}
            manifest.write(args.out.with_name("manifest.json"))
            log.info("truecaser for %s from %d sentences", args.lang, n)
        else:
            src, tgt = pretokenizers(args.tokenize, tuple(args.langs),
                                     {lang: Path(p) for lang, p in args.truecaser})
            manifest = Manifest(stage="tokenize_corpus",
                                params={"tokenize": args.tokenize, "langs": args.langs})
            manifest.add_input(args.docs)
            manifest.counts = apply(args.docs, args.out_dir / "docs.parquet", src, tgt)
            manifest.write(args.out_dir / "manifest.json")
            log.info("%s: %s", args.docs, manifest.counts)
    except (OSError, ValueError) as e:
        log.error("%s", e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
