"""translate never destroys or invents (issue 36 item 4), checked before any model is loaded:
an output that is its own input is refused and the input kept, every search flag's range is
checked naming the flag, and Maruf-style '<d>' lines need --doc-separator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline_lib.translate import TranslateError, layout_from_lines, main

MODEL = "no/such/model"   # the checks come first: no model is needed to see them


def test_an_output_that_is_the_input_is_refused_and_the_input_kept(tmp_path, capsys):
    mine = tmp_path / "mine.es"
    mine.write_text("Hola mundo.\n")
    os.link(mine, tmp_path / "same.es")            # another name of the same file
    for out in (mine, tmp_path / "same.es"):
        assert main([MODEL, "-i", str(mine), "-o", str(out)]) == 2
        assert f"--output {out} is the --input file itself" in capsys.readouterr().err
    docids = tmp_path / "ids"
    docids.write_text("d1\n")
    assert main([MODEL, "-i", str(mine), "--docids", str(docids), "-o", str(docids)]) == 2
    assert "is the --docids file itself" in capsys.readouterr().err
    assert main([MODEL, "-i", str(mine), "-o", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert mine.read_text() == "Hola mundo.\n" and docids.read_text() == "d1\n"


@pytest.mark.parametrize("flags, said", [
    (["--batch-size", "-1"], "--batch-size -1: must be at least 1"),
    (["--batch-size", "0"], "--batch-size 0: must be at least 1"),
    (["--threads", "-1"], "--threads -1: must be at least 0"),
    (["--max-len-b", "-5"], "--max-len-b -5: must be at least 0"),
    (["--lenpen", "nan"], "--lenpen nan: must be a finite number >= 0"),
    (["--max-len-a", "inf"], "--max-len-a inf: must be a finite number >= 0"),
    (["--beam", "4", "--nbest", "5"], "--nbest 5: must be between 1 and --beam"),
])
def test_each_search_flag_out_of_range_is_named(flags, said, capsys):
    with pytest.raises(SystemExit) as e:
        main([MODEL, *flags])
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_maruf_document_lines_need_the_separator():
    with pytest.raises(TranslateError, match=r"mine.es:2: a line '<d>' separates documents"):
        layout_from_lines(["Uno.", "<d>", "Dos."], name="mine.es")
    layout = layout_from_lines(["Uno.", "<d>", "Dos."], "<d>", name="mine.es")
    assert [r["doc_id"] for r in layout.rows] == ["d0", "d1"]


def test_a_separator_that_never_occurs_in_blank_separated_input_is_refused_as_ingest_does():
    lines = ["Uno.", "Dos.", "", "Tres.", "", "Cuatro."]
    with pytest.raises(TranslateError, match=r"mine.es:3: --doc-separator is '<d>', which occurs "
                                             r"on no line, but the input has 2 blank lines"):
        layout_from_lines(lines, "<d>", name="mine.es")
    layout = layout_from_lines(lines, "", name="mine.es")
    assert [r["doc_id"] for r in layout.rows] == ["d0", "d0", "d1", "d2"]


def test_blank_lines_pass_through_blank_and_are_not_translated():
    """Issue 36 item 4: a blank line under `--doc-separator '<d>'` or `--docids` became a
    sentence of its own, and the model made a translation up for it."""
    sep = layout_from_lines(["Uno.", "", "<d>", "Dos."], "<d>", name="mine.es")
    assert [r["text"] for r in sep.rows] == ["Uno.", "Dos."]
    assert sep.lines == [None, "", "<d>", None]
    ids = layout_from_lines(["Uno.", "", "Dos."], docids=["a", "a", "b"], name="mine.es")
    assert [(r["doc_id"], r["sent_idx"], r["text"]) for r in ids.rows] == [("a", 0, "Uno."),
                                                                           ("b", 0, "Dos.")]
    assert ids.lines == [None, "", None]


def test_invisible_characters_are_removed_as_ingest_removes_them(capsys):
    from pipeline_lib.translate import visible

    assert visible(["Ho\u200bla \u202emundo\u202c.", "Sí.\u200b"]) == ["Hola mundo.", "Sí."]
    assert "removed 4 invisible characters (zero-width, bidi controls) from 2 lines" in \
        capsys.readouterr().err
    assert visible(["Hola."]) == ["Hola."] and capsys.readouterr().err == ""


def test_an_output_folder_it_may_not_write_into_is_refused_before_translating(tmp_path, capsys,
                                                                              monkeypatch):
    """Issue 36 item 6: permission denied on --output is one line, before any work (os.access
    is asked: the tests may run as root, for whom a chmod denies nothing)."""
    mine = tmp_path / "mine.es"
    mine.write_text("Hola mundo.\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != locked and real(p, mode))
    assert main([MODEL, "-i", str(mine), "-o", str(locked / "sub" / "out.en")]) == 2
    assert capsys.readouterr().err == (f"translate: --output {locked / 'sub' / 'out.en'}: "
                                       f"permission denied: cannot write into {locked}\n")
    assert not (locked / "sub").exists()
