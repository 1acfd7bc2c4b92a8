"""The page's blocks (tables, paragraphs, figures, sections), the names of the files written
beside it and the formatting of a cell: what every table module builds and the renderers read,
so a table is built once and rendered to Markdown and HTML alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NA = "n/a"
BLEU_FILE = "bleu_intervals.png"
CURVES_FILE = "training_curves.png"
CONFIG_FILE = "config.json"


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class Text:
    """Paragraphs (the regime statement): plain sentences before the tables."""

    paragraphs: list[str]
    title: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class Figure:
    """An image beside ``index.html`` with the sentences that say how to read it."""

    src: str
    alt: str
    notes: list[str] = field(default_factory=list)


@dataclass
class Section:
    title: str
    blocks: list[Table | Figure | Text] = field(default_factory=list)


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return NA
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def hms(seconds: float | None) -> str:
    """Seconds as h:mm:ss, the benchmark files' own notation."""
    if seconds is None:
        return NA
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
