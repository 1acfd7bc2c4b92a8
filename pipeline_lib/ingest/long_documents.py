"""Documents too long to be documents (issue 36, item 3): a file whose docids or separator did
not cut it reads as one document of thousands of lines, and a context model then reads across
what were document boundaries. Ingest records such a split in its manifest and warns; translate
warns likewise. A warning, not a refusal: a corpus may hold long documents (a novel, a
parliament session), and the context models read only a few sentences back."""

from __future__ import annotations

from collections.abc import Mapping

#: more sentences than any document of the seed papers' corpora holds: TED talks (IWSLT), news
#: stories (WMT, LDC), Europarl and News Commentary documents (Maruf et al. 2019), ASPEC
#: abstracts and Bible chapters (Psalm 119: 176 verses) all stay well under it
MAX_SENTENCES = 1000
#: a split of at least this many sentences in a single document looks like one file read whole
#: (a one-talk IWSLT test set of a few hundred lines also meets it: hence a warning)
ONE_DOCUMENT_MIN = 200

ADVICE = ("if the file holds several documents, give docids or a doc_separator that occurs in "
          "it: a context model would otherwise read across document boundaries")


def finding(lengths: Mapping[str, int]) -> dict | None:
    """What is implausible about one split's documents (doc id -> sentences), or None."""
    if not lengths:
        return None
    doc, longest = max(lengths.items(), key=lambda kv: kv[1])
    total = sum(lengths.values())
    if len(lengths) == 1 and longest >= ONE_DOCUMENT_MIN:
        what = f"all {total} sentences are one document ({doc!r})"
    elif longest > MAX_SENTENCES:
        over = sum(n > MAX_SENTENCES for n in lengths.values())
        what = (f"{over} of {len(lengths)} documents hold more than {MAX_SENTENCES} sentences "
                f"(the longest, {doc!r}, {longest} of {total})")
    else:
        return None
    return {"finding": what, "documents": len(lengths), "sentences": total,
            "longest": {"doc_id": doc, "sentences": longest}}
