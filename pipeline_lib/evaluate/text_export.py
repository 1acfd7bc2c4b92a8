"""Every scored system's hypotheses as plain text, one segment a line, beside the references.

WHY: sacreBLEU's command line, COMET and every other MT tool read plain text; the pipeline's
hypotheses are Parquet. ``score_test`` writes, for each test set ``<corpus>/<split>``, the very
strings it scores, in the references' order (documents in order, sentences in order):

    <text>/<corpus>/<split>/ref.txt           the first reference (ref2.txt, ... for more)
    <text>/<corpus>/<split>/<system>.txt      each decoded system

so ``sacrebleu <text>/bible/test/ref.txt -i <text>/bible/test/transformer.txt -m bleu -b -w 2``
prints the report's BLEU (tests/unit/evaluate/test_text_export.py runs the ``sacrebleu``
command). A line break inside a segment would shift every later line, so CR and LF become
spaces (sacreBLEU's 13a tokenizer reads both as spaces too); how many were replaced goes into
the manifest. A sentence with fewer references than others gets an empty line in the missing
reference file, which the command line reads as an empty reference (the Python API skips it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from pipeline_lib.atomic import write_text

_BREAK = re.compile(r"[\r\n]")


def one_line(segment: str) -> tuple[str, int]:
    """``segment`` with CR/LF as spaces, and how many there were."""
    text, n = _BREAK.subn(" ", segment)
    return text, n


def _lines(segments: Iterable[str | None]) -> tuple[str, int]:
    replaced, out = 0, []
    for s in segments:
        text, n = one_line(s or "")
        replaced += n
        out.append(text + "\n")
    return "".join(out), replaced


def export(name: str, refs: list[list[str]], hyps: Mapping[str, list[str]], out_dir: Path
           ) -> int:
    """Write test set ``name`` (``corpus/split``) under ``out_dir``; returns the line breaks
    replaced."""
    folder = Path(out_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    replaced = 0
    for k in range(max(len(r) for r in refs)):
        text, n = _lines(r[k] if k < len(r) else None for r in refs)
        write_text(folder / ("ref.txt" if k == 0 else f"ref{k + 1}.txt"), text)
        replaced += n
    for system, lines in hyps.items():
        text, n = _lines(lines)
        write_text(folder / f"{system}.txt", text)
        replaced += n
    return replaced
