"""BLEU as the papers computed it: ``multi-bleu.perl`` on Moses-tokenized (and, where the paper
says so, lowercased) text, beside sacreBLEU's detokenized BLEU (issue 37, item 2).

Post (2018, "A Call for Clarity in Reporting BLEU Scores") measured up to 1.8 BLEU between the
two on the same output, so a preset's sacreBLEU cannot be put beside the paper's number. The
models here read raw text, so the hypotheses and references are tokenized at scoring time with
sacremoses (a Python port of Moses' ``tokenizer.perl``, no escaping of ``&<>'"``, no aggressive
hyphen splitting: the script's defaults but escaping, which changes no token boundary) and
scored by sacreBLEU with ``tokenize='none'``, no smoothing and the closest reference length:
multi-bleu.perl's definition (zero when some n-gram order has no match). A model trained on
Moses-tokenized text, as the papers', would have produced its tokens itself: the remaining gap
is the pre-tokenization of training (docs/limitations.md).

Configured by ``score.tokenized_bleu`` (``{tokenizer: moses, lowercase: ..., as: <what the
paper ran, with its section>}``); off by default. Imported only then: the GPU machine has no
sacremoses.
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU

#: tokenizers of the target side a paper's BLEU was computed on
TOKENIZERS = ("moses",)


@dataclass(frozen=True)
class TokenizedBleu:
    """One paper's BLEU: target language (Moses' rules per language), case, and what it stands
    for (named in the report)."""

    lang: str
    lowercase: bool
    described_as: str
    tokenizer: str = "moses"

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenized_bleu: tokenizer {self.tokenizer!r}: one of {TOKENIZERS}")

    def tokenize(self, lines: list[str | None]) -> list[str | None]:
        """Moses tokens of each line; None (a reference stream's gap) stays None."""
        from sacremoses import MosesTokenizer

        moses = MosesTokenizer(lang=self.lang)
        return [None if line is None else moses.tokenize(line, escape=False, return_str=True)
                for line in lines]

    def score(self, hyps: list[str], refs: list[list[str | None]]) -> tuple[float, str]:
        """Corpus BLEU of tokenized ``hyps`` against tokenized reference streams, and its
        signature: the tokenizer and sacreBLEU's own."""
        import sacremoses

        bleu = BLEU(tokenize="none", lowercase=self.lowercase, smooth_method="none", force=True)
        score = bleu.corpus_score(self.tokenize(hyps), [self.tokenize(r) for r in refs])
        signature = (f"multi-bleu.perl{' -lc' if self.lowercase else ''} on sacremoses "
                     f"{sacremoses.__version__} MosesTokenizer(lang={self.lang}, escape=False) "
                     f"tokens = sacreBLEU {bleu.get_signature()}")
        return round(score.score, 2), signature
