"""Property-based variants of issue 21's reader failures (hypothesis, derandomized):

* duplicate document ids on either side, in every reader that pairs documents by id (``sgml``,
  ``iwslt`` .xml and ``train.tags``, ``ldc_doc``, ``wmt_xml``): the first document of an id is
  the one paired, its own segments with the first reference of that id, and every segment read
  is kept or quarantined exactly once;
* character references and entities (surrogate halves, NUL and other controls, C1, beyond
  U+10FFFF, named and undefined entities) in the segment text of every markup reader: the corpus
  is written to Parquet or refused with an ``InputError`` naming the file, never a crash, and no
  kept text holds a surrogate or a control character.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_readers_common import run, sides_out
from test_readers_fuzz import CASES, text_positions

from pipeline_lib.ingest import InputError, Limits
from pipeline_lib.ingest.__main__ import ingest

PROPERTY = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
IDS = st.sampled_from(["a", "b", "c"])
DOCS = st.lists(st.tuples(IDS, st.integers(1, 2)), min_size=1, max_size=5)


def _sgml(kind: str, docs: list[tuple[str, int]], mark: str) -> str:
    body = "".join(f'<doc docid="{d}">\n' + "".join(f'<seg id="{j}">{mark}{i} {j}</seg>\n'
                                                    for j in range(1, n + 1)) + "</doc>\n"
                   for i, (d, n) in enumerate(docs))
    return f'<{kind} setid="x">\n{body}</{kind}>\n'


def _tags(docs: list[tuple[str, int]], mark: str) -> str:
    return "".join(f"<url>u{i}</url>\n<talkid>{d}</talkid>\n"
                   + "".join(f"{mark}{i} {j}\n" for j in range(1, n + 1))
                   for i, (d, n) in enumerate(docs))


def _expected(src: list[tuple[str, int]], ref: list[tuple[str, int]]) -> list[tuple[str, str]]:
    """Pairs kept when the first document of each id pairs with the first reference of it."""
    first_ref = {}
    for k, (d, n) in enumerate(ref):
        first_ref.setdefault(d, (k, n))
    out, seen = [], set()
    for i, (d, n) in enumerate(src):
        if d in seen:
            continue
        seen.add(d)
        if d in first_ref and first_ref[d][1] == n:
            out += [(f"S{i} {j}", f"T{first_ref[d][0]} {j}") for j in range(1, n + 1)]
    return out


@PROPERTY
@given(reader=st.sampled_from(["sgml", "iwslt_xml", "iwslt_tags", "ldc_doc"]), src=DOCS, ref=DOCS)
def test_duplicate_ids_on_either_side_pair_the_first_documents(tmp_path_factory, reader, src, ref):
    tmp = tmp_path_factory.mktemp("dup")
    if reader == "iwslt_tags":
        a, b = tmp / "train.tags.es", tmp / "train.tags.en"
        a.write_text(_tags(src, "S"))
        b.write_text(_tags(ref, "T"))
    else:
        suffix = ".xml" if reader == "iwslt_xml" else ".sgm"
        a, b = tmp / f"src{suffix}", tmp / f"ref{suffix}"
        a.write_text(_sgml("srcset", src, "S"))
        b.write_text(_sgml("refset", ref, "T"))
    name = {"iwslt_xml": "iwslt", "iwslt_tags": "iwslt"}.get(reader, reader)
    kept, bad = run({"reader": name, "splits": {"train": {"src": str(a), "tgt": str(b)}}},
                    Limits(2000))
    assert [(s.src, s.tgt[0]) for s in kept] == _expected(src, ref)
    assert sides_out(kept, bad) == sum(n for _, n in src) + sum(n for _, n in ref)


@PROPERTY
@given(docs=DOCS)
def test_wmt_xml_duplicate_doc_ids_pair_each_first_document_with_its_own_reference(
        tmp_path_factory, docs):
    tmp = tmp_path_factory.mktemp("wmt")
    body = "".join(f'<doc id="{d}"><src lang="es"><p>'
                   + "".join(f'<seg id="{j}">S{i} {j}</seg>' for j in range(1, n + 1))
                   + '</p></src><ref lang="en" translator="A"><p>'
                   + "".join(f'<seg id="{j}">T{i} {j}</seg>' for j in range(1, n + 1))
                   + "</p></ref></doc>\n" for i, (d, n) in enumerate(docs))
    xml = tmp / "t.xml"
    xml.write_text(f'<dataset id="x"><collection id="c">\n{body}</collection></dataset>\n')
    kept, bad = run({"reader": "wmt_xml", "splits": {"test": {"src": str(xml)}}}, Limits(2000))
    assert [(s.src, s.tgt[0]) for s in kept] == _expected(docs, docs)
    assert sides_out(kept, bad) == 2 * sum(n for _, n in docs)


MARKUP = [c for c in CASES if c.text or c.name == "iwslt_tags"]
CODE_POINTS = st.one_of(st.integers(0xD800, 0xDFFF), st.integers(0, 0x20),
                        st.integers(0x7F, 0x9F), st.integers(0x110000, 0x200000),
                        st.integers(0x21, 0x2FFFF))
REFERENCES = st.one_of(
    CODE_POINTS.map(lambda c: f"&#x{c:X};"), CODE_POINTS.map(lambda c: f"&#{c};"),
    st.sampled_from(["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&xxe;", "&nbsp;", "&#;",
                     "&#x;", "&"]))
BAD_TEXT = re.compile(r"[\ud800-\udfff\x00-\x08\x0b-\x1f\x7f-\x9f]")


@PROPERTY
@given(data=st.data())
def test_references_in_every_markup_reader_are_written_or_refused_never_a_crash(
        tmp_path_factory, data):
    case = data.draw(st.sampled_from(MARKUP), label="case")
    role = data.draw(st.sampled_from(sorted(case.files)), label="role")
    at = data.draw(st.sampled_from(text_positions(case, role)), label="offset")
    token = data.draw(REFERENCES, label="reference").encode()
    tmp = tmp_path_factory.mktemp("ref")
    paths = {}
    for r, src in case.files.items():
        paths[r] = tmp / r / src.name
        paths[r].parent.mkdir()
        shutil.copyfile(src, paths[r])
    original = case.files[role].read_bytes()
    paths[role].write_bytes(original[:at] + token + original[at:])
    out = tmp / "out"
    try:
        record = ingest("c", case.spec(paths), Limits(2000), out)
    except InputError as e:
        assert case.strict and str(paths[role]) in str(e), e
        return
    import pyarrow.parquet as pq

    kept = pq.read_table(out / "docs.parquet").to_pylist()
    for row in kept:
        for text in [row["src"], *(row["tgt"] or [])]:
            assert not BAD_TEXT.search(text), (token, text)
    assert record["counts"]["kept"] == len(kept)
    assert Path(out / "quarantine.parquet").exists()
