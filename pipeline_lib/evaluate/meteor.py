"""Corpus-level METEOR for ``score_test``: NLTK's METEOR alignment, exact + stem only, with the
statistics summed over the test set.

WHAT is computed, for reproduction and for comparison with papers that report METEOR (Chen et
al. 2021 cite Lavie & Agarwal 2007, the METEOR of that era; the current reference is METEOR 1.5,
Denkowski & Lavie 2014):

* **Implementation**: ``nltk.translate.meteor_score`` (NLTK, the version in ``meteor_signature``;
  3.10.4 when this was written). Its word alignment (``_enum_align_words``: exact matches
  first, then stem matches among the words left, then WordNet synonyms) gives each sentence its
  statistics; :func:`sentence_stats` reproduces NLTK's public ``meteor_score`` exactly
  (tests/unit/evaluate/test_meteor.py checks it), so only the aggregation below is ours.
* **Modules**: ``exact`` and ``stem``. No synonym module: NLTK's needs the WordNet corpus, a
  download, so it is switched off (a ``wordnet`` whose ``synsets`` is always empty, :class:`NoWordNet`).
  No paraphrase module (NLTK has none).
* **Stemmer** by target language (``--tgt-lang``): English: NLTK's default ``PorterStemmer``;
  a language NLTK's Snowball stemmer covers (:data:`SNOWBALL`: de, fr, es, ru, ...): that
  Snowball stemmer, as METEOR 1.5 does for its languages; any other language, or none given:
  no stemmer, exact matches only. Chinese, Japanese, Korean and Thai targets get no METEOR at
  all (``None``, :data:`NOT_SEGMENTED`): their text is not split into words by spaces, so word
  matching on the tokens below is not meaningful.
* **Parameters**: NLTK's defaults, alpha 0.9, beta 3.0, gamma 0.5 (Banerjee & Lavie 2005's);
  every match weighs 1 whatever module found it.
* **Tokenisation and case**: sacreBLEU's ``13a`` tokenizer (the one BLEU uses here) splits
  hypothesis and references into tokens; NLTK then lowercases them (its default ``preprocess``).
  METEOR is case-insensitive whatever ``score.lowercase`` says.
* **Multiple references**: per sentence, the reference with the highest sentence METEOR
  (NLTK's ``meteor_score`` takes the max; the first of tied ones) gives that sentence's
  statistics, as METEOR 1.5 does.
* **Corpus level**: the statistics are summed over the sentences (matches M, hypothesis tokens
  H, reference tokens R, chunks C) and the score computed once from the sums, as METEOR 1.5
  does: P = M/H, R = M/R, Fmean = PR / (alpha P + (1 - alpha) R), penalty = gamma (C/M)^beta,
  METEOR = (1 - penalty) Fmean, x 100. The mean of NLTK's sentence scores (what a script
  looping over ``meteor_score`` reports) is kept beside it as ``meteor_sentence_mean``.

HOW this differs from METEOR 1.5 (so the numbers are not comparable with a paper's METEOR 1.5,
nor with Lavie & Agarwal 2007's 0.6):

* modules: METEOR 1.5 matches exact, stem, synonym (WordNet, English) and paraphrase (its
  language's paraphrase table); here exact and stem only, so METEOR is lower;
* parameters: METEOR 1.5 uses parameters tuned per language and task (English ``rank``:
  alpha 0.85, beta 0.20, gamma 0.60, delta 0.75, module weights exact 1.0, stem 0.6, synonym 0.8,
  paraphrase 0.6) and weighs content and function words apart (delta); here NLTK's fixed
  0.9 / 3.0 / 0.5, every match weight 1, no function-word weighting;
* alignment: METEOR 1.5 searches for the alignment with the fewest chunks; NLTK aligns greedily
  (each hypothesis word, from the last, to the last free reference word that matches);
* tokenisation and normalisation: METEOR 1.5's own tokenizer and (with ``-norm``) punctuation
  normalisation; here sacreBLEU's 13a and lowercasing;
* aggregation: the same (corpus statistics), the best reference per sentence the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version

try:
    from nltk.stem import PorterStemmer, SnowballStemmer
    from nltk.stem.api import StemmerI
    from nltk.translate import meteor_score as nltk_meteor
except ImportError:   # a machine without NLTK (a lent GPU): no METEOR, and describe() says so
    nltk_meteor = None
    StemmerI = object
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

ALPHA, BETA, GAMMA = 0.9, 3.0, 0.5      # NLTK's defaults, used as they are

#: ISO 639-1 code -> NLTK's Snowball stemmer (English keeps NLTK's default Porter stemmer)
SNOWBALL = {"ar": "arabic", "da": "danish", "nl": "dutch", "fi": "finnish", "fr": "french",
            "de": "german", "hu": "hungarian", "it": "italian", "no": "norwegian",
            "nb": "norwegian", "pt": "portuguese", "ro": "romanian", "ru": "russian",
            "es": "spanish", "sv": "swedish"}
#: targets written without spaces between words: no METEOR (word matching is not meaningful)
NOT_SEGMENTED = {"zh": "Chinese", "ja": "Japanese", "ko": "Korean", "th": "Thai"}


class NoWordNet:
    """A stand-in for NLTK's WordNet reader with no synonyms: the synonym module off, and no
    WordNet download needed."""

    def synsets(self, *_args, **_kwargs) -> list:
        return []


class NoStemmer(StemmerI):
    """Every word is its own stem: the stem module adds nothing (exact matches only)."""

    def stem(self, token: str) -> str:
        return token


@dataclass(frozen=True)
class Stats:
    """One sentence's (or the corpus's) METEOR statistics against its chosen reference."""

    matches: int = 0
    hyp_len: int = 0
    ref_len: int = 0
    chunks: int = 0

    def __add__(self, other: "Stats") -> "Stats":
        return Stats(self.matches + other.matches, self.hyp_len + other.hyp_len,
                     self.ref_len + other.ref_len, self.chunks + other.chunks)

    def score(self, alpha: float = ALPHA, beta: float = BETA, gamma: float = GAMMA) -> float:
        """METEOR in [0, 1] from these statistics (NLTK's formula; 0 without a match)."""
        if self.matches == 0:
            return 0.0
        p, r = self.matches / self.hyp_len, self.matches / self.ref_len
        fmean = p * r / (alpha * p + (1 - alpha) * r)
        return (1 - gamma * (self.chunks / self.matches) ** beta) * fmean


class Meteor:
    """Corpus METEOR for one target language (None: not given, exact matches only)."""

    def __init__(self, tgt_lang: str | None = None):
        self.tgt_lang = tgt_lang
        lang = (tgt_lang or "").lower().split("-")[0].split("_")[0]
        self.installed = nltk_meteor is not None
        self.meaningful = lang not in NOT_SEGMENTED and self.installed
        if not self.installed:
            self.stemmer, self.stemmer_name = NoStemmer(), None
        elif lang == "en":
            self.stemmer, self.stemmer_name = PorterStemmer(), "porter"
        elif lang in SNOWBALL:
            self.stemmer, self.stemmer_name = SnowballStemmer(SNOWBALL[lang]), \
                f"snowball-{SNOWBALL[lang]}"
        else:
            self.stemmer, self.stemmer_name = NoStemmer(), None
        self.modules = ["exact"] + (["stem"] if self.stemmer_name else [])
        self.wordnet = NoWordNet()
        self.tokenize = Tokenizer13a()
        self._stats = lru_cache(maxsize=None)(self._best_stats)

    def signature(self) -> str:
        """What produced a METEOR number, in one line (like sacreBLEU's signatures)."""
        if not self.installed:
            return "not computed: nltk is not installed"
        return (f"nltk:{version('nltk')}|modules:{'+'.join(self.modules)}"
                f"|stem:{self.stemmer_name or 'none'}|tgt:{self.tgt_lang or 'unknown'}"
                f"|a:{ALPHA}|b:{BETA}|g:{GAMMA}|tok:13a|case:lc|agg:corpus")

    def describe(self) -> dict:
        """The METEOR settings as scores.json records them (``meteor`` at the top level)."""
        lang = (self.tgt_lang or "").lower().split("-")[0]
        if not self.installed:
            note = ("not computed: nltk is not installed here (a machine with the project's "
                    "requirements computes it)")
        elif not self.meaningful:
            note = (f"not computed: {NOT_SEGMENTED[lang]} text is not split into words by "
                    "spaces, so METEOR's word matching on 13a tokens is not meaningful")
        elif self.tgt_lang is None:
            note = "target language not given (--tgt-lang): exact matches only, no stemming"
        elif self.stemmer_name is None:
            note = f"NLTK has no stemmer for {self.tgt_lang}: exact matches only"
        else:
            note = f"exact + stem ({self.stemmer_name}); no synonym, no paraphrase module"
        return {"implementation": (f"nltk {version('nltk')} nltk.translate.meteor_score"
                                   if self.installed else "none"),
                "tgt_lang": self.tgt_lang, "modules": self.modules,
                "stemmer": self.stemmer_name, "alpha": ALPHA, "beta": BETA, "gamma": GAMMA,
                "tokenize": "13a", "lowercase": True, "aggregation": "corpus statistics",
                "meaningful": self.meaningful, "note": note, "signature": self.signature()}

    def tokens(self, text: str) -> tuple[str, ...]:
        return tuple(self.tokenize(text.strip()).split())

    def sentence_stats(self, hyp: tuple[str, ...], ref: tuple[str, ...]) -> Stats:
        """NLTK's alignment of one hypothesis with one reference, as statistics."""
        enum_hyp, enum_ref = nltk_meteor._generate_enums(hyp, ref)   # lowercases
        matches, _, _ = nltk_meteor._enum_align_words(enum_hyp, enum_ref, stemmer=self.stemmer,
                                                      wordnet=self.wordnet)
        chunks = nltk_meteor._count_chunks(matches) if matches else 0
        return Stats(len(matches), len(enum_hyp), len(enum_ref), chunks)

    def _best_stats(self, hyp: str, refs: tuple[str, ...]) -> Stats:
        """The statistics against the reference with the best sentence METEOR (the first of
        tied ones), as NLTK's ``meteor_score`` picks it."""
        h = self.tokens(hyp)
        best = None
        for ref in refs:
            s = self.sentence_stats(h, self.tokens(ref))
            if best is None or s.score() > best.score():
                best = s
        return best

    def corpus(self, hyps: list[str], refs: list[list[str]]) -> dict | None:
        """``{"meteor": corpus METEOR x 100, "meteor_sentence_mean": mean sentence METEOR x 100}``
        (2 decimals); None where METEOR is not meaningful for the target language."""
        if not self.meaningful:
            return None
        per_sentence = [self._stats(h, tuple(r)) for h, r in zip(hyps, refs, strict=True)]
        total = sum(per_sentence, Stats())
        mean = sum(s.score() for s in per_sentence) / len(per_sentence) if per_sentence else 0.0
        return {"meteor": round(100 * total.score(), 2),
                "meteor_sentence_mean": round(100 * mean, 2)}
