"""Faults that still passed ingestion (issue 21, failures 1-10 and the partial cases): each test
is the failure's reproduction, which failed before its fix."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_readers_common import ROOT, reasons, run

from pipeline_lib.atomic import partial_name
from pipeline_lib.layout import NAME_PATTERN
from pipeline_lib.ingest import InputError
from pipeline_lib.ingest.__main__ import main as ingest_main
from pipeline_lib.ingest.lines import MAX_LINE_BYTES, read_lines


def cli(spec: dict, out: Path, caplog, *extra: str, corpus: str = "c") -> tuple[int, str]:
    """``python -m pipeline_lib.ingest`` in this process (language check off: it has its own
    tests and costs a model load)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ingest"):
        rc = ingest_main(["--corpus", corpus, "--spec", json.dumps(spec), "--out-dir", str(out),
                          "--hygiene", json.dumps({"langid": False}), *extra])
    return rc, caplog.text


def rows(out: Path, name: str = "docs.parquet") -> list[dict]:
    return pq.read_table(out / name).to_pylist()


def write(path: Path, text: str | bytes) -> str:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def sgml(kind: str, docs: list[tuple[str, list[str]]]) -> str:
    """An SGML set: ``docs`` are (docid, segment texts)."""
    body = "".join(f'<doc docid="{d}">\n' + "".join(f'<seg id="{i}">{t}</seg>\n'
                                                    for i, t in enumerate(segs, 1)) + "</doc>\n"
                   for d, segs in docs)
    return f"<{kind} setid=\"x\">\n{body}</{kind}>\n"


# --- 1. a repeated docid pairs the source with the wrong reference ---------------------------

def test_1_the_first_of_two_reference_documents_with_one_id_is_paired(tmp_path):
    src = write(tmp_path / "src.sgm", sgml("srcset", [("d1", ["Uno."])]))
    ref = write(tmp_path / "ref.sgm", sgml("refset", [("d1", ["One."]), ("d1", ["WRONG."])]))
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": src, "tgt": ref}}})
    assert [(s.src, s.tgt) for s in kept] == [("Uno.", ["One."])]
    assert [(r.reason, r.origin_line, r.record) for r in bad] == [("duplicate_doc_id", 6, "WRONG.")]
    # the IWSLT .xml files go through the same alignment; train.tags pair talks by talk id
    src_xml = write(tmp_path / "a.en.xml", sgml("srcset", [("7", ["Uno."])]))
    ref_xml = write(tmp_path / "a.de.xml", sgml("refset", [("7", ["One."]), ("7", ["WRONG."])]))
    kept, bad = run({"reader": "iwslt", "splits": {"dev": {"src": src_xml, "tgt": ref_xml}}})
    assert [(s.src, s.tgt) for s in kept] == [("Uno.", ["One."])] and reasons(bad) == {
        "duplicate_doc_id": 1}
    talk = "<url>u</url>\n<talkid>{}</talkid>\n{}\n"
    tags_src = write(tmp_path / "train.tags.es", talk.format(5, "Uno."))
    tags_tgt = write(tmp_path / "train.tags.en",
                     talk.format(5, "One.") + talk.format(5, "WRONG."))
    kept, bad = run({"reader": "iwslt", "splits": {"train": {"src": tags_src, "tgt": tags_tgt}}})
    assert [(s.src, s.tgt) for s in kept] == [("Uno.", ["One."])]
    assert [(r.reason, r.record) for r in bad] == [("duplicate_doc_id", "WRONG.")]


def test_1_wmt_xml_repeated_doc_id_keeps_the_first_reference(tmp_path):
    doc = ('<doc id="d1"><src lang="es"><p><seg id="1">{}</seg></p></src>'
           '<ref lang="en" translator="A"><p><seg id="1">{}</seg></p></ref></doc>\n')
    xml = write(tmp_path / "t.xml", '<dataset id="x"><collection id="c">\n'
                + doc.format("Uno.", "One.") + doc.format("Otro.", "WRONG.")
                + "</collection></dataset>\n")
    kept, bad = run({"reader": "wmt_xml", "splits": {"test": {"src": xml}}})
    assert [(s.src, s.tgt) for s in kept] == [("Uno.", ["One."])]
    assert sorted(r.record for r in bad) == ["Otro.", "WRONG."]


# --- 2. lone surrogates crashed the Parquet writer ----------------------------------------

def test_2_surrogate_references_are_quarantined_with_file_and_line(tmp_path, caplog):
    src = write(tmp_path / "src.sgm", sgml("srcset", [("d1", ["Uno &#xD800; dos.", "Tres."])]))
    ref = write(tmp_path / "ref.sgm", sgml("refset", [("d1", ["One two.", "Three."])]))
    rc, log = cli({"reader": "sgml", "splits": {"test": {"src": src, "tgt": ref}}},
                  tmp_path / "out", caplog)
    assert rc == 0, log
    assert [r["src"] for r in rows(tmp_path / "out")] == ["Tres."]
    assert [(r["origin_file"], r["origin_line"], r["reason"], r["record"])
            for r in rows(tmp_path / "out", "quarantine.parquet")] == [
        (src, 3, "invalid_character_reference", "Uno &#xD800; dos. ||| One two.")]
    talk = "<url>u</url>\n<talkid>5</talkid>\n{}\n"
    es = write(tmp_path / "train.tags.es", talk.format("Uno.\nDos &#xDC80;."))
    en = write(tmp_path / "train.tags.en", talk.format("One.\nTwo."))
    rc, log = cli({"reader": "iwslt", "splits": {"train": {"src": es, "tgt": en}}},
                  tmp_path / "out2", caplog)
    assert rc == 0, log
    assert [(r["origin_line"], r["reason"]) for r in rows(tmp_path / "out2", "quarantine.parquet")] \
        == [(4, "invalid_character_reference")]


def test_2_surrogate_in_wmt_xml_is_an_error_with_its_line(tmp_path, caplog):
    xml = write(tmp_path / "t.xml", '<dataset id="x"><collection id="c">\n<doc id="d1">\n'
                '<src lang="es"><p><seg id="1">A &#xD800;</seg></p></src>\n</doc>\n'
                '</collection></dataset>\n')
    rc, log = cli({"reader": "wmt_xml", "splits": {"test": {"src": xml}}}, tmp_path / "o", caplog)
    assert rc == 2 and f"{xml}:3: malformed XML: reference to invalid character number" in log


# --- 3. leaks between splits ----------------------------------------------------------------

def plain(tmp: Path, name: str, pairs: list[tuple[str, str]], docids: list[str] | None = None):
    split = {"src": write(tmp / f"{name}.es", "".join(f"{s}\n" for s, _ in pairs)),
             "tgt": write(tmp / f"{name}.en", "".join(f"{t}\n" for _, t in pairs))}
    if docids:
        split["docids"] = write(tmp / f"{name}.ids", "".join(f"{d}\n" for d in docids))
    return split


PAIRS = [(f"Frase número {w} del corpus.", f"Sentence number {w} of the corpus.")
         for w in ("uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho")]


def test_3_the_same_files_as_train_and_test_are_an_error(tmp_path, caplog):
    same = plain(tmp_path, "all", PAIRS)   # copies: one file in two splits is refused earlier
    rc, log = cli({"reader": "plaintext", "splits": {"train": same,
                                                     "test": plain(tmp_path, "copy", PAIRS)}},
                  tmp_path / "out", caplog)
    assert rc == 2
    assert "every pair of split 'test' of corpus 'c' (8) is also in its training data" in log
    assert not (tmp_path / "out" / "docs.parquet").exists()


def test_3_dev_documents_repeated_in_train_are_removed_from_train(tmp_path, caplog):
    train = plain(tmp_path, "train", PAIRS[:6], ["a", "a", "b", "b", "c", "c"])
    dev = plain(tmp_path, "dev", PAIRS[2:4] + PAIRS[6:8], ["x", "x", "y", "y"])
    rc, log = cli({"reader": "plaintext", "splits": {"train": train, "dev": dev}},
                  tmp_path / "out", caplog)
    assert rc == 0, log
    kept = rows(tmp_path / "out")
    assert [r["src"] for r in kept if r["split"] == "train"] == [s for s, _ in PAIRS[:2] + PAIRS[4:6]]
    assert len([r for r in kept if r["split"] == "dev"]) == 4   # dev is never filtered
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["hygiene"]["removed"] == {"overlap_dev": {"train": 2}}
    assert man["hygiene"]["overlap"] == {"train-dev": {"documents": 1, "pairs": 2}}
    assert [r["reason"] for r in rows(tmp_path / "out", "quarantine.parquet")] == ["overlap_dev"] * 2


def test_3_dev_equal_to_test_is_an_error(tmp_path, caplog):
    train = plain(tmp_path, "train", PAIRS[:4])
    dev = plain(tmp_path, "dev", PAIRS[4:])
    test = plain(tmp_path, "test", PAIRS[4:])   # a copy: one file in two splits is refused earlier
    rc, log = cli({"reader": "plaintext", "splits": {"train": train, "dev": dev, "test": test}},
                  tmp_path / "out", caplog)
    assert rc == 2 and "splits 'dev' and 'test' of corpus 'c' hold the same 4 / 4 pairs" in log


# --- 4. copies and misalignments were kept ------------------------------------------------

def test_4_copies_and_a_one_word_to_300_words_pair_are_removed(tmp_path, caplog):
    pairs = PAIRS[:3] + [("Una frase sin traducir.", "Una frase sin traducir."),
                         ("Hola.", " ".join(["muy"] * 300))]
    rc, log = cli({"reader": "plaintext", "splits": {"train": plain(tmp_path, "t", pairs)}},
                  tmp_path / "out", caplog)
    assert rc == 0, log
    assert len(rows(tmp_path / "out")) == 3
    assert [(r["origin_line"], r["reason"]) for r in rows(tmp_path / "out", "quarantine.parquet")] \
        == [(4, "source_copy"), (5, "length_ratio")]


def test_4_maruf_separators_read_as_text_are_an_error_with_a_hint(tmp_path):
    split = {"src": write(tmp_path / "a.es", "<d>\nUno.\nDos.\n<d>\nTres.\n"),
             "tgt": write(tmp_path / "a.en", "<d>\nOne.\nTwo.\n<d>\nThree.\n")}
    with pytest.raises(InputError, match=r"a\.es:1: the line '<d>' is a document separator .*"
                                         r"but doc_separator is '': set doc_separator: '<d>'"):
        run({"reader": "plaintext", "splits": {"train": split}})
    kept, _ = run({"reader": "plaintext", "splits": {"train": {**split, "doc_separator": "<d>"}}})
    assert [s.src for s in kept] == ["Uno.", "Dos.", "Tres."]


def test_4_a_separator_that_never_occurs_in_blank_separated_files_is_an_error(tmp_path):
    """Issue 36: `doc_separator: "<d>"` on files whose documents are separated by blank lines
    exited 0 with four documents merged into one and the blank lines quarantined; now the
    first blank line is named with the separator to set. One stray blank line is no separator."""
    src = write(tmp_path / "b.es", "Uno.\nDos.\n\nTres.\n\nCuatro.\n")
    tgt = write(tmp_path / "b.en", "One.\nTwo.\n\nThree.\n\nFour.\n")
    split = {"src": src, "tgt": tgt, "doc_separator": "<d>"}
    with pytest.raises(InputError, match=r"b\.es:3: doc_separator is '<d>', which occurs on no "
                                         r"line, but the file has 2 blank lines: .*set "
                                         r'doc_separator: "" \(a blank line\)'):
        run({"reader": "plaintext", "splits": {"train": split}})
    kept, _ = run({"reader": "plaintext", "splits": {"train": {"src": src, "tgt": tgt}}})
    assert len({s.doc_id for s in kept}) == 3
    stray = {"src": write(tmp_path / "s.es", "Uno.\n\nDos.\n"),
             "tgt": write(tmp_path / "s.en", "One.\n\nTwo.\n"), "doc_separator": "<d>"}
    kept, _ = run({"reader": "plaintext", "splits": {"train": stray}})
    assert [s.src for s in kept] == ["Uno.", "Dos."]


# --- 5. invisible and C1 control characters ------------------------------------------------

def test_5_invisible_only_line_is_empty_and_bidi_and_c1_controls_are_caught(tmp_path, caplog):
    spec = {"reader": "plaintext", "splits": {"train": plain(tmp_path, "t", [
        ("Uno.", "\u200b"),                                   # only a zero-width space
        ("Dos \u202eatxet\u202c.", "Two \u2067text\u2069."),  # RLO/PDF, RLI/PDI
        ("Tres\u009b.", "Three."),                            # C1 control (CSI)
        ("Cuatro.", "Four.")])}}
    rc, log = cli(spec, tmp_path / "out", caplog)
    assert rc == 0, log
    assert [(r["src"], r["tgt"]) for r in rows(tmp_path / "out")] == [
        ("Dos atxet.", ["Two text."]), ("Cuatro.", ["Four."])]
    assert [(r["origin_line"], r["reason"]) for r in rows(tmp_path / "out", "quarantine.parquet")] \
        == [(1, "empty_segment"), (3, "control_character")]
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["repaired"] == {"invisible_character_removed": 5}


# --- 6. duplicate YAML keys ------------------------------------------------------------------

def test_6_a_key_given_twice_is_an_error_naming_file_and_lines(tmp_path):
    from pipeline_lib.config_files import DuplicateKeyError
    from pipeline_lib.run_config import load_config

    user = tmp_path / "user.yaml"
    user.write_text("corpora:\n  news:\n    reader: plaintext\n    splits:\n      train:\n"
                    "        src: a.es\n        tgt: a.en\n        src: b.es\n")
    with pytest.raises(DuplicateKeyError, match=r"user\.yaml:8: duplicate key 'src' \(first given "
                                                r"at line 6\)"):
        load_config(ROOT / "config" / "config.yaml", user)
    user.write_text("corpora:\n  bible:\n    max_chapters: 2\n  bible:\n    max_chapters: 3\n")
    with pytest.raises(DuplicateKeyError, match=r"user\.yaml:4: duplicate key 'bible'"):
        load_config(ROOT / "config" / "config.yaml", user)


def test_6_snakemake_refuses_a_config_file_with_a_repeated_key(tmp_path):
    (tmp_path / "user.yaml").write_text("src_lang: es\nsrc_lang: de\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n",
                           "--configfile", str(ROOT / "config/config.yaml"),
                           str(tmp_path / "user.yaml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "user.yaml:2: duplicate key 'src_lang' (first given at line 1)" in proc.stdout + proc.stderr


def test_partial_a_user_bible_entry_with_another_reader_is_not_merged_with_the_default(tmp_path):
    from pipeline_lib.run_config import load_config

    user = tmp_path / "user.yaml"
    user.write_text("corpora:\n  bible:\n    reader: plaintext\n    splits:\n      train: "
                    "{src: a.es, tgt: a.en}\n")
    config = load_config(ROOT / "config" / "config.yaml", user)
    assert config["corpora"]["bible"] == {"reader": "plaintext",
                                          "splits": {"train": {"src": "a.es", "tgt": "a.en"}}}
    user.write_text("corpora:\n  bible:\n    max_chapters: 20\n")   # same reader: merged
    assert load_config(ROOT / "config" / "config.yaml", user)["corpora"]["bible"][
        "src_module"] == "spaRV1909eb"


# --- 7. a named pipe blocked the run -------------------------------------------------------

def test_7_a_named_pipe_is_refused_at_once(tmp_path, caplog):
    fifo = tmp_path / "a.es"
    os.mkfifo(fifo)
    en = write(tmp_path / "a.en", "One.\n")
    rc, log = cli({"reader": "plaintext", "splits": {"train": {"src": str(fifo), "tgt": en}}},
                  tmp_path / "out", caplog)
    assert rc == 2 and f"{fifo}: is a named pipe (FIFO)" in log
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- 8. names that cannot name files --------------------------------------------------------

@pytest.mark.parametrize("name", ["bible\n", "x" * 300])
def test_8_corpus_name_with_a_trailing_newline_or_too_long_is_refused(tmp_path, caplog, name):
    from snakemake.exceptions import WorkflowError

    from pipeline_lib.run_config import load_config

    with pytest.raises(WorkflowError, match="corpora"):
        load_config(overrides={"corpora": {name: {"reader": "plaintext", "splits": {
            "train": {"src": "a", "tgt": "b"}}}}})
    rc, log = cli({"reader": "plaintext", "splits": {"train": {"src": "a", "tgt": "b"}}},
                  tmp_path / "out", caplog, corpus=name)
    assert rc == 2 and "must match" in log
    assert re.match(NAME_PATTERN, "bible\n")   # why the code uses fullmatch


# --- 9. a comment holding <seg> -------------------------------------------------------------

def test_9_an_sgml_comment_is_skipped_even_across_lines(tmp_path):
    src = write(tmp_path / "src.sgm", '<srcset setid="x">\n<doc docid="d1">\n'
                '<!-- <seg id="9">old</seg> -->\n<seg id="1">Uno.</seg>\n<!--\n<seg id="8">x</seg>'
                '\n-->\n</doc>\n</srcset>\n')
    ref = write(tmp_path / "ref.sgm", sgml("refset", [("d1", ["One."])]))
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": src, "tgt": ref}}})
    assert [(s.src, s.tgt) for s in kept] == [("Uno.", ["One."])] and not bad
    cut = write(tmp_path / "cut.sgm", '<srcset setid="x">\n<doc docid="d1">\n<seg id="1">Uno.</seg>'
                '\n<!-- unfinished\n</doc>\n</srcset>\n')
    with pytest.raises(InputError, match=r"cut\.sgm:4: a comment \(<!--\) opened here is never"):
        run({"reader": "sgml", "splits": {"test": {"src": cut, "tgt": ref}}})


# --- 10. entities that disappeared ------------------------------------------------------------

def test_10_an_external_entity_quarantines_its_segment(tmp_path):
    xml = write(tmp_path / "t.xml", '<?xml version="1.0"?>\n<!DOCTYPE dataset [<!ENTITY xxe SYSTEM '
                '"file:///etc/hostname">]>\n<dataset id="x"><collection id="c">\n<doc id="d1">\n'
                '<src lang="de"><p><seg id="1">Eins &xxe; Ende.</seg><seg id="2">Zwei.</seg></p>'
                '</src>\n<ref lang="en" translator="A"><p><seg id="1">One end.</seg>'
                '<seg id="2">Two.</seg></p></ref>\n</doc></collection></dataset>\n')
    kept, bad = run({"reader": "wmt_xml", "splits": {"test": {"src": xml}}})
    assert [s.src for s in kept] == ["Zwei."]
    assert [(r.reason, r.origin_line, r.record) for r in bad] == [
        ("unresolved_entity", 5, "Eins Ende. ||| One end.")]


def test_10_nul_reference_is_a_control_character_not_literal_text(tmp_path):
    src = write(tmp_path / "src.sgm", sgml("srcset", [("d1", ["Null &#0; hier.", "Gut."])]))
    ref = write(tmp_path / "ref.sgm", sgml("refset", [("d1", ["Zero here.", "Good."])]))
    kept, bad = run({"reader": "sgml", "splits": {"test": {"src": src, "tgt": ref}}})
    assert [s.src for s in kept] == ["Gut."] and reasons(bad) == {"control_character": 1}


# --- partial cases ----------------------------------------------------------------------------

def test_partial_cr_line_ends_are_an_error_with_the_conversion(tmp_path):
    split = {"src": write(tmp_path / "a.es", "Uno.\rDos.\r"), "tgt": write(tmp_path / "a.en", "One.\nTwo.\n")}
    with pytest.raises(InputError, match=r"a\.es:1: has CR line ends .*dos2unix -c mac"):
        run({"reader": "plaintext", "splits": {"train": split}})


def test_partial_nbsp_line_is_a_segment_and_misaligned_separators_name_a_line(tmp_path):
    split = {"src": write(tmp_path / "a.es", "Uno.\nDos.\n\nTres.\n"),
             "tgt": write(tmp_path / "a.en", "One.\n\u00a0\n\nThree.\n")}
    kept, bad = run({"reader": "plaintext", "splits": {"train": split}})
    assert [s.src for s in kept] == ["Uno.", "Tres."]
    assert [(Path(r.origin_file).name, r.origin_line, r.reason) for r in bad] == [
        ("a.en", 2, "empty_segment")]
    split["tgt"] = write(tmp_path / "a.en", "One.\n\nTwo.\n\nThree.\n")
    with pytest.raises(InputError, match=r"a\.es:1: has 2 documents but .*a\.en has more: "
                                         r"separators do not line up; the first document whose "
                                         r"sides differ in length starts at .*a\.es:1 and "):
        run({"reader": "plaintext", "splits": {"train": split}})


def test_partial_an_overlong_gzip_line_is_never_held_whole(tmp_path):
    path = tmp_path / "big.es.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"Uno.\n")
        for _ in range(40):
            f.write(b"x" * (1 << 20))
        f.write(b"\nDos.\n")
    tracemalloc.start()
    lines = list(read_lines(str(path)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(ln.no, ln.fault) for ln in lines] == [(1, None), (2, "too_long"), (3, None)]
    assert len(lines[1].text) < 1000 and peak < 8 * MAX_LINE_BYTES   # the line is 40 MiB


def test_partial_an_unreadable_file_is_named(tmp_path, caplog, monkeypatch):
    en = write(tmp_path / "a.en", "One.\n")
    es = write(tmp_path / "a.es", "Uno.\n")
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == es else real(p, mode))
    rc, log = cli({"reader": "plaintext", "splits": {"train": {"src": es, "tgt": en}}},
                  tmp_path / "out", caplog)
    assert rc == 2 and f"{es}: cannot read: Permission denied" in log


def test_partial_a_killed_run_leaves_no_partial_file_behind_the_next_one(tmp_path, caplog):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    out.mkdir()
    stale = partial_name(out / "docs.parquet").with_name(
        partial_name(out / "docs.parquet").name.rsplit("-", 1)[0] + f"-{dead.pid}")
    stale.write_bytes(b"half a file")
    split = plain(tmp_path, "t", PAIRS[:2])
    rc, log = cli({"reader": "plaintext", "splits": {"train": split}}, out, caplog)
    assert rc == 0, log
    assert sorted(p.name for p in out.iterdir()) == ["docs.parquet", "manifest.json",
                                                     "quarantine.parquet"]
