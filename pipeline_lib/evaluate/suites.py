"""Contrastive test suites as their authors score them: readers, decision rules, accuracy.

Pure and light (standard library only), so that workflow planning can call
:func:`check_suite_directions` before the DAG is built without importing torch; the model side
(``CheckpointScorer``) and the ``contrastive`` command are in pipeline_lib.evaluate.discourse.

Each example has a source sentence with its context and several candidate translations that
differ only in a context-dependent word; a model scores every candidate by its log-probability
(higher is better; the official scripts read losses, lower is better, which is the same order).
Each suite is scored by its authors' rule, so the accuracies equal those of the official scripts
on the same scores, ties included:

* Voita, Sennrich and Titov (2019), "When a Good Translation is Wrong in Context", En-Ru suites
  ``deixis_test.json``, ``lex_cohesion_test.json``, ``ellipsis_infl.json``, ``ellipsis_vp.json``
  (repository lena-voita/good-translation-wrong-in-context): a JSON list of
  ``{"dst": [candidate, ...], "true_ind": i, "src": "c1 _eos c2 _eos c3 _eos s", "ctx_dist": d}``
  where every candidate is the target context and current sentence joined by `` _eos ``.
  ``scripts/evaluate_consistency.py`` (``get_scores``) cuts the loss file into one group per
  example and counts it correct when ``np.argmin(losses) == true_ind``: among tied best
  candidates the first wins (:attr:`Decision.FIRST_BEST`). This matters: the real
  ``ellipsis_vp`` and ``ellipsis_infl`` list the reference string twice in some groups, so with
  ties counted as wrong even an oracle stays below 100 %. Accuracy per phenomenon (the suite) and
  per ``ctx_dist``.
* Müller et al. (2018), ContraPro En-De pronouns (repository ZurichNLP/ContraPro):
  ``contrapro.json``, a list of ``{"src segment", "ref segment", "src pronoun", "ref pronoun",
  "ante distance", "errors": [{"contrastive": ...}, ...]}``. ``evaluate.py`` (``count_errors``)
  counts an example correct when the reference is strictly better than every contrastive
  candidate (``lt``/``gt``; a tie is wrong, :attr:`Decision.STRICT`) and groups by the category
  ``"<src pronoun>:<ref pronoun>"`` lowercased (``it:er``) and by antecedent distance (0, 1, 2,
  3, >3). The context sentences are not in the JSON (they come from OpenSubtitles):
  ``conversion_scripts/json2text_and_context.pl --context N`` writes ``contrapro.context.{en,de}``
  with N lines (oldest first; an empty line before the document start) for every scored line,
  i.e. for the reference and again for each contrastive candidate, each ended by ``\\n`` and
  nothing else. Lines are therefore split on ``\\n`` only (a lone ``\\r`` inside an
  OpenSubtitles line is text), and the line count must be N x scored lines (``context_size``).

Every suite declares its language pair (``direction``, default en-ru for voita and en-de for
contrapro); :func:`check_suite_directions` refuses a suite whose pair differs from the model's.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

VOITA_SEP = " _eos "
# (source context, source, target context, candidates) -> one score per candidate, higher = better
ScoreFn = Callable[[list[str], str, list[str], list[str]], list[float]]


class Decision(Enum):
    """When an example counts as correct; each suite format keeps its authors' rule."""

    FIRST_BEST = "first_best"  # Voita et al.: np.argmin(losses) == true_ind, first of ties wins
    STRICT = "strict"          # ContraPro: reference strictly better than every contrastive


class SuiteFormat(Enum):
    """The two public suite formats, with the language pair and decision rule of each."""

    VOITA = "voita"
    CONTRAPRO = "contrapro"

    @property
    def direction(self) -> str:
        return {SuiteFormat.VOITA: "en-ru", SuiteFormat.CONTRAPRO: "en-de"}[self]

    @property
    def decision(self) -> Decision:
        return {SuiteFormat.VOITA: Decision.FIRST_BEST,
                SuiteFormat.CONTRAPRO: Decision.STRICT}[self]


@dataclass(frozen=True)
class ContrastiveExample:
    """One contrastive example: candidates share the context; ``true_index`` is the reference.

    ``phenomenon`` is the group the official script reports: the suite name (Voita) or the
    ``src:ref`` pronoun category (ContraPro).
    """

    phenomenon: str
    src_context: list[str]
    src: str
    tgt_context: list[str]
    candidates: list[str]
    true_index: int
    distance: str | None = None


class SuiteFormatError(ValueError):
    """A suite file that cannot be read; the message names the file and the record."""


class SuiteConfigError(ValueError):
    """A suite entry that does not fit the run (format, direction); the message names the suite."""


def _load_json_list(path: Path) -> list:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SuiteFormatError(f"{path}:{e.lineno}: not JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise SuiteFormatError(f"{path}:1: expected a JSON list of examples")
    return data


def read_voita(path: Path, phenomenon: str) -> list[ContrastiveExample]:
    """Read a Voita et al. (2019) consistency suite (``consistency_testsets/*.json``)."""
    out = []
    for i, rec in enumerate(_load_json_list(path)):
        try:
            src = rec["src"].split(VOITA_SEP)
            cands = [c.split(VOITA_SEP) for c in rec["dst"]]
            true = int(rec["true_ind"])
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        if not 0 <= true < len(cands):
            raise SuiteFormatError(f"{path}: example {i}: true_ind {true} outside its "
                                   f"{len(cands)} candidates")
        contexts = {tuple(c[:-1]) for c in cands}
        if len(contexts) != 1:
            raise SuiteFormatError(f"{path}: example {i}: candidates differ in their context")
        dist = rec.get("ctx_dist")
        out.append(ContrastiveExample(phenomenon, src[:-1], src[-1], list(cands[0][:-1]),
                                      [c[-1] for c in cands], true,
                                      None if dist is None else str(dist)))
    return out


def _ante_bucket(d) -> str | None:
    if d is None:
        return None
    return ">3" if int(d) > 3 else str(int(d))


def read_context_lines(path: Path) -> list[str]:
    """The lines of a ``contrapro.context.*`` file, split on ``\\n`` only.

    json2text_and_context.pl ends every line with ``\\n``; universal-newline reading would also
    split at a lone ``\\r`` inside an OpenSubtitles line and shift every later context.
    """
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines[-1] == "":
        lines.pop()   # the newline that ends the last line
    return lines


def _context_blocks(path: Path, lines: list[str], context_size: int,
                    groups: list[int]) -> list[list[str]]:
    """One context (``context_size`` lines, oldest first) per example of ``groups`` (its scored
    lines), checking the layout json2text_and_context.pl writes: ``context_size`` lines for every
    scored line, the same lines repeated for the reference and each contrastive candidate."""
    scored = sum(groups)
    if len(lines) != context_size * scored:
        hint = (f"; it looks extracted with --context {len(lines) // scored}"
                if scored and len(lines) % scored == 0 else "")
        raise SuiteFormatError(
            f"{path}: {len(lines)} lines, expected {context_size * scored} = context_size "
            f"{context_size} x {scored} scored lines (reference + contrastive candidates of "
            f"{len(groups)} examples){hint}")
    out = []
    first = 0
    for i, n in enumerate(groups):
        block = lines[first: first + context_size]
        for j in range(1, n):
            at = first + j * context_size
            if lines[at: at + context_size] != block:
                raise SuiteFormatError(f"{path}:{at + 1}: context of example {i} candidate {j} "
                                       "differs from its reference's: file and JSON out of step")
        out.append([c for c in block if c.strip()])   # empty line = before the document start
        first += n * context_size
    return out


def read_contrapro(path: Path, context_src: Path | None = None, context_tgt: Path | None = None,
                   context_size: int = 1) -> list[ContrastiveExample]:
    """Read ContraPro (Müller et al. 2018), optionally with the context files that
    ``json2text_and_context.pl --context <context_size>`` extracted."""
    if context_size < 1:
        raise SuiteConfigError(f"{path}: context_size must be at least 1, not {context_size}")
    out = []
    for i, rec in enumerate(_load_json_list(path)):
        try:
            cands = [rec["ref segment"]] + [e["contrastive"] for e in rec["errors"]]
            category = f"{rec['src pronoun'].lower()}:{rec['ref pronoun'].lower()}"
            dist = _ante_bucket(rec.get("ante distance"))
            src = rec["src segment"]
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise SuiteFormatError(f"{path}: example {i}: missing or bad field ({e})") from e
        out.append(ContrastiveExample(category, [], src, [], cands, 0, dist))
    groups = [len(ex.candidates) for ex in out]
    for side, f in (("src_context", context_src), ("tgt_context", context_tgt)):
        if f is not None:
            blocks = _context_blocks(f, read_context_lines(f), context_size, groups)
            out = [replace(ex, **{side: ctx}) for ex, ctx in zip(out, blocks)]
    return out


def suite_format(name: str, spec: dict) -> SuiteFormat:
    try:
        return SuiteFormat(spec.get("format"))
    except ValueError:
        raise SuiteConfigError(f"suite {name}: unknown format {spec.get('format')!r} (one of "
                               f"{', '.join(f.value for f in SuiteFormat)})") from None


def suite_direction(name: str, spec: dict) -> str:
    """The suite's language pair ``src-tgt``: its ``direction``, else its format's default."""
    return spec.get("direction") or suite_format(name, spec).direction


def check_suite_directions(suites: dict[str, dict], src_lang: str, tgt_lang: str) -> None:
    """Refuse suites whose language pair is not the model's (``src_lang``-``tgt_lang``).

    The suites are En-Ru and En-De; scoring them with, say, a Zh-En model gives numbers without
    meaning, so this is a configuration error, raised before anything runs (workflow planning
    calls it as well as the ``contrastive`` command). Every mismatch is named at once.
    """
    pair = f"{src_lang}-{tgt_lang}"
    wrong = [f"suite {name} is {d}" for name, spec in suites.items()
             if (d := suite_direction(name, spec)) != pair]
    if wrong:
        raise SuiteConfigError(f"contrastive suites in the wrong direction: {'; '.join(wrong)}; "
                               f"the configured language pair (src_lang-tgt_lang) is {pair}. "
                               "Remove them from score.discourse_suites or set their direction.")


def read_suite(name: str, spec: dict) -> list[ContrastiveExample]:
    """A suite from its config entry: ``{format: voita|contrapro, path, [direction],
    [context_src, context_tgt, context_size], [phenomenon]}``."""
    fmt = suite_format(name, spec)
    path = Path(spec["path"])
    if fmt is SuiteFormat.VOITA:
        return read_voita(path, spec.get("phenomenon", path.stem))
    opt = {k: Path(spec[k]) for k in ("context_src", "context_tgt") if spec.get(k)}
    return read_contrapro(path, **opt, context_size=int(spec.get("context_size", 1)))


def is_correct(scores: list[float], true_index: int, decision: Decision) -> bool:
    """The official decision on one example's scores (higher is better)."""
    if any(math.isnan(s) for s in scores):
        raise ValueError(f"NaN among the candidate scores {scores}")
    if decision is Decision.FIRST_BEST:
        return scores.index(max(scores)) == true_index     # np.argmin over losses
    return all(scores[true_index] > s for j, s in enumerate(scores) if j != true_index)


def evaluate_suite(examples: Iterable[ContrastiveExample], score_fn: ScoreFn,
                   decision: Decision) -> dict:
    """Accuracy overall, per phenomenon and per context/antecedent distance."""
    total = Counter()
    correct = Counter()
    for i, ex in enumerate(examples):
        scores = score_fn(ex.src_context, ex.src, ex.tgt_context, ex.candidates)
        try:
            ok = is_correct(list(scores), ex.true_index, decision)
        except ValueError as e:
            raise ValueError(f"example {i} ({ex.src!r}): {e}") from e
        keys = ["all", f"phenomenon:{ex.phenomenon}"]
        if ex.distance is not None:
            keys.append(f"distance:{ex.distance}")
        for key in keys:
            total[key] += 1
            correct[key] += ok

    def acc(prefix: str) -> dict:
        return {k.split(":", 1)[1]: {"accuracy": round(100 * correct[k] / total[k], 2),
                                     "correct": correct[k], "total": total[k]}
                for k in sorted(total) if k.startswith(prefix)}

    return {"accuracy": round(100 * correct["all"] / total["all"], 2) if total["all"] else None,
            "correct": correct["all"], "total": total["all"], "decision": decision.value,
            "by_phenomenon": acc("phenomenon:"), "by_distance": acc("distance:")}
