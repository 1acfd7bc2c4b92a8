"""Corpus readers: each turns one raw corpus format into rows of the document schema.

A reader is a module in this package exposing

``read(corpus: str, spec: dict, limits: Limits) -> Iterator[Sentence | Rejected]``
    one item per input record, in document order: a kept ``Sentence`` or a ``Rejected`` with its
    reason (so input count = kept + quarantined by construction; tests check it against the file);
``input_files(spec: dict) -> list[str]``
    the raw files it reads, so that Snakemake reruns ingestion when one of them changes.

Unreadable input (malformed or truncated markup, a file in UTF-16/32, undecodable bytes in a file
that must be decoded whole, files whose lines cannot be paired) raises ``InputError`` naming the
file and line; a corpus entry that a reader cannot use raises ``SpecError`` naming the key.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any


class InputError(ValueError):
    """Input that cannot be read at all; the message names the file and line."""

    def __init__(self, path: str, line: int | None, message: str):
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")
        self.path, self.line = path, line


class SpecError(ValueError):
    """A corpus entry (config ``corpora.<name>``) that a reader cannot use; names the key."""


@dataclass(frozen=True)
class Limits:
    """Per-segment and per-file sanity limits from config ``ingest``."""

    max_line_chars: int = 2000
    max_quarantined_share: float = 0.2   # of a file's lines (see lines.check_files)


# reader name in config -> module of this package
READERS: dict[str, str] = {
    "bible": "bible",
    "sgml": "sgml",
    "wmt_xml": "wmt_xml",
    "iwslt": "iwslt",
    "plaintext": "plaintext",
    "ldc_doc": "ldc",
    "ldc_sent": "ldc",
    "mono_sgml": "mono",
    "mono_text": "mono",
    "aspec": "aspec",
    "gale_tdf": "tdf",
    "union": "union",
}


def reader_module(reader: str) -> ModuleType:
    try:
        return importlib.import_module(f"{__name__}.{READERS[reader]}")
    except KeyError:
        raise SpecError(f"unknown reader {reader!r}; known: {sorted(READERS)}") from None


def code_modules(spec: dict) -> list[str]:
    """The modules ``python -m pipeline_lib.ingest`` runs for corpus entry ``spec`` (dotted,
    below ``pipeline_lib``): the CLI and the entry's reader, or a union's readers. Its rule's
    code hash follows them; the CLI picks readers by name at run time, which the hash does not
    follow, and another corpus's reader is none of this one's business."""
    readers = {spec["reader"], *(p["reader"] for p in spec.get("parts") or [])}
    return ["ingest.__main__", *(f"ingest.{READERS[r]}" for r in sorted(readers))]


def rule_inputs(spec: dict, results: Any) -> list[str]:
    """What rule ingest_corpus reads for corpus entry ``spec``: the raw files its reader reads
    (changing one reruns only that corpus's ingestion), or, for a downloaded corpus, its
    download manifest in ``results`` (the plan's ``pipeline_lib.results.Results``, passed in: a
    module ingestion imported would enter every ingest job's code hash), which stands for them
    (rule download_corpus). Reader modules import their own libraries lazily, so this is cheap
    at planning time."""
    if spec.get("download"):
        return [results.download(spec["download"]).manifest]
    return reader_module(spec["reader"]).input_files(spec)
