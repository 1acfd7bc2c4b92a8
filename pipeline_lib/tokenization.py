"""The papers' word segmentation and casing before BPE, per language (config ``tokenize``), and
its inverse after decoding: shared by the stage that tokenizes corpora
(``pipeline_lib.preprocess.pretokenize``), decoding (``evaluate.decode``), ``translate`` and
the plan, which checks the steps.

The papers learn BPE on tokenized text: Moses ``tokenizer.perl`` and ``truecase.perl`` (Jiang et
al. 2019 Sec. 5.2, Chen et al. 2021 Sec. 4.1 fn. 7), lowercased English (Chen, Zh-En), jieba for
Chinese (Jiang Sec. 5.2, Chen Sec. 4.1), KyTea for Japanese (Deguchi et al. 2019 Sec. 4.1).
Steps, applied in this order to every sentence of a side in that language:

- one segmenter: ``moses`` (sacremoses, a port of tokenizer.perl: no escaping of ``&<>'"``, no
  aggressive hyphen splitting), ``jieba`` (Chinese, its default dictionary, HMM on) or ``mecab``
  (Japanese: fugashi with unidic-lite, a packaged MeCab dictionary; a departure from KyTea, which
  has no maintained Python package);
- then ``truecase`` (Moses' truecaser, trained on the run's BPE text of that language after
  segmentation: ``pipeline_lib.preprocess.pretokenize train``) or ``lowercase``.

``detokenizer`` undoes what can be undone on a hypothesis: Moses detokenization and detruecasing
(the first letter of the sentence capitalised), spaces removed between Chinese or Japanese
characters; lowercasing cannot be undone, so a lowercased target is scored lowercased (the
presets that lowercase set ``score.lowercase``). The default run tokenizes nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

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
