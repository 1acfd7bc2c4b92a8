"""OSIS verse markup (as stored in SWORD modules) -> one line of plain text.

Why not pysword's own ``clean=True``: it deletes tags without regard to the spaces that the tags
stood for, so WEB's ``God</w><note>…</note><w …>created`` becomes ``Godcreated`` and
``only born</q><note>…</note><q><w>Son`` becomes ``only bornSon``; it also keeps footnote text
inline (``Leviathan41:1 Leviathan is a name for …``), which would leave English-only text in a
parallel corpus. The rules here:

* dropped with their content: ``<note>`` (footnotes, cross references, variant readings),
  non-canonical ``<title>`` (section headings), ``<speaker>`` (Song of Songs speaker labels,
  absent in the Spanish text), and everything after ``<chapter eID=…/>`` (WEB appends its
  glossary to the last verse of Revelation);
* kept as text: canonical titles (psalm superscriptions), because RV1909 has them inline in
  verse 1 and dropping only the English side would misalign every titled psalm;
* tags that separate words (notes, line/paragraph/list markers, titles, milestones, and a
  ``</w>`` directly followed by ``<w``) become a space, inline wrappers (``<w>``, ``<q>``,
  ``<transChange>``, ``<seg>``) are removed; then runs of spaces collapse and a space before
  closing punctuation (or after an opening one) is removed, which undoes the spaces that a
  note between a word and its comma would otherwise leave;
* bare Strong's tags that some renderers leave in plain output (``<G3588>``, ``<H07225>``)
  are removed; XML entities are unescaped.

Spanish chapter openings: RV1909 prints the first word of each chapter in capitals ("EN el
principio", "JEHOVÁ", "Y DESPUÉS"); ``normalise_chapter_opening`` re-cases the first
word (two or more letters) of verse 1 when it is all capitals: Capitalised at the start of the
verse, else the word's usual spelling in the module ("Y después", "Y Jehová"), so that the
capitals do not become a spurious source-side signal for "document start". A capitalised word
after an inline psalm title ("Salmo de David … ¡OH Jehová") is not the first word and stays.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from typing import Iterable, Mapping

# Elements removed together with their content (non-greedy; none of them nests in these modules).
_DROP_WITH_CONTENT = re.compile(
    r"<note\b[^>]*>.*?</note>|<speaker\b[^>]*>.*?</speaker>"
    r"|<title\b(?![^>]*canonical=\"true\")[^>]*>.*?</title>",
    re.DOTALL,
)
# Everything after the chapter-end milestone is not verse text (book end, appended glossary).
_CHAPTER_END = re.compile(r"<chapter\b[^>]*\beID=[^>]*/>.*", re.DOTALL)
# Adjacent word wrappers: the source had a word boundary here even without whitespace.
_W_BOUNDARY = re.compile(r"</w>(?=<w\b)")
# Tags that stand between words (block, line, list, milestone, title boundaries).
_SEPARATING = re.compile(r"</?(?:l|lg|lb|div|p|list|item|title|milestone|chapter|verse|br)\b[^>]*>")
# Bare Strong's numbers as diatheke/renderers emit them in "plain" output.
_STRONGS = re.compile(r"<[GH]\d+[a-z]?>")
_ANY_TAG = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_CLOSE = re.compile(r" +(?=[,.;:!?’”»)\]])")
_SPACE_AFTER_OPEN = re.compile(r"(?<=[“‘«(\[¿¡]) +")
_CAPS_WORD = re.compile(r"\b([^\W\d_]{2,})\b")
_WORD = re.compile(r"[^\W\d_]+")


def clean_osis(markup: str) -> str:
    """Plain text of one verse's OSIS markup ('' when the verse holds only notes or markers)."""
    text = _CHAPTER_END.sub("", markup)
    text = _DROP_WITH_CONTENT.sub(" ", text)
    text = _STRONGS.sub("", text)
    text = _W_BOUNDARY.sub("</w> ", text)
    text = _SEPARATING.sub(" ", text)
    text = _ANY_TAG.sub("", text)
    text = html.unescape(text)
    text = _SPACES.sub(" ", text).strip()
    text = _SPACE_BEFORE_CLOSE.sub("", text)
    return _SPACE_AFTER_OPEN.sub("", text)


def usual_casing(texts: Iterable[str]) -> dict[str, str]:
    """lower-case word -> its most frequent non-all-capital spelling in ``texts``.

    Used to re-case a capitalised chapter opening that is not sentence-initial: "Y DESPUÉS"
    becomes "Y después" (the corpus writes "después"), "Y JEHOVÁ" becomes "Y Jehová".
    """
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w in _WORD.findall(text) if not (len(w) > 1 and w.isupper()))
    best: dict[str, str] = {}
    for word, _ in counts.most_common():
        best.setdefault(word.lower(), word)
    return best


def normalise_chapter_opening(text: str, casing: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """Re-case the first word of a chapter if it is printed in capitals; returns (text, changed).

    Only the first word of two or more letters is examined (an all-capital word elsewhere is
    left alone). At the start of the text it becomes Capitalised; after another word ("Y
    DESPUÉS") it takes its usual spelling from ``casing`` (``usual_casing``), else Capitalised.
    """
    m = _CAPS_WORD.search(text)
    if m is None or not m.group(1).isupper():
        return text, False
    word = m.group(1)
    capitalised = word[0] + word[1:].lower()
    at_start = not _WORD.search(text[: m.start(1)])
    new = capitalised if at_start or casing is None else casing.get(word.lower(), capitalised)
    return text[: m.start(1)] + new + text[m.end(1):], True
