"""``translate`` on the tiny pipeline's trained models: a two-document text comes back with the
same layout, and for the same input the hypotheses are the strings rule decode_test wrote, for
every registered model: the sentence-level ones (transformer, DBSA), the context models, the
cache (history) and cross-task (both units)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from conftest import EXTRA_CORPUS

pytestmark = pytest.mark.slow

# decode_test's settings in tests/conftest.py's tiny config (beam 2, max_len_b 5)
SEARCH = ["--beam", "2", "--max-len-b", "5"]


def _translate(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline_lib.translate", *args],
                          input=stdin, capture_output=True, timeout=300)


def _two_documents() -> bytes:
    """The extra corpus (tests/conftest.py) as two blank-line separated documents."""
    src, ids = EXTRA_CORPUS["extra.es"], EXTRA_CORPUS["extra.docids"]
    lines = []
    for k, (line, doc) in enumerate(zip(src, ids)):
        if k and doc != ids[k - 1]:
            lines.append("")
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("system,job,unit", [
    ("transformer", "transformer", "document"), ("dbsa", "dbsa", "document"),
    ("doct", "doct", "document"),
    ("camn", "camn", "document"), ("cache", "cache", "document"),
    ("crosstask", "crosstask", "document"), ("crosstask_sent", "crosstask", "sentence")])
def test_translate_equals_decode_test_and_keeps_the_layout(tiny_pipeline, system, job, unit):
    text = _two_documents()
    out = _translate(str(tiny_pipeline / "results" / "train_model" / job), *SEARCH,
                     "--unit", unit, stdin=text)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    got = out.stdout.decode().split("\n")[:-1]
    want_lines = text.decode().split("\n")[:-1]
    assert len(got) == len(want_lines)                              # one line per input line
    assert [g == "" for g in got] == [w == "" for w in want_lines]  # separators where they were
    hyps = pq.read_table(tiny_pipeline / "results" / "decode_test" / system / "extra" /
                         "test.parquet").to_pylist()
    by_doc = sorted(hyps, key=lambda r: (r["doc_id"], r["sent_idx"]))
    assert [g for g in got if g != ""] == [r["hyp"] for r in by_doc]


def test_other_separators_nbest_and_doc_ids(tiny_pipeline, tmp_path):
    model = tiny_pipeline / "results" / "train_model" / "transformer"
    src = "\n".join(["<d>", *EXTRA_CORPUS["extra.es"][:2], "<d>", *EXTRA_CORPUS["extra.es"][2:]])
    (tmp_path / "in.txt").write_text(src + "\n")
    out = _translate(str(model), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"),
                     "--doc-separator", "<d>", *SEARCH)
    assert out.returncode == 0, out.stderr.decode()
    lines = (tmp_path / "out.txt").read_text().split("\n")[:-1]
    assert lines[0] == lines[3] == "<d>" and len(lines) == 6
    nbest = _translate(str(model), "--nbest", "2", *SEARCH, stdin=_two_documents())
    rows = nbest.stdout.decode().split("\n")[:-1]
    assert sum(" ||| " in r for r in rows) == 8 and rows.count("") == 1
    assert [r.split(" ||| ")[0] for r in rows if r] == ["0", "0", "1", "1", "2", "2", "3", "3"]
    (tmp_path / "ids").write_text("\n".join(EXTRA_CORPUS["extra.docids"]) + "\n")
    (tmp_path / "flat.txt").write_text("\n".join(EXTRA_CORPUS["extra.es"]) + "\n")
    by_ids = _translate(str(model), "-i", str(tmp_path / "flat.txt"), "--docids",
                        str(tmp_path / "ids"), *SEARCH)
    plain = _translate(str(model), *SEARCH, stdin=_two_documents())
    assert by_ids.stdout.decode().split("\n")[:-1] == \
        [line for line in plain.stdout.decode().split("\n")[:-1] if line]


def test_clear_errors(tiny_pipeline, tmp_path):
    missing = _translate(str(tmp_path / "nowhere"), stdin=b"Hola.\n")
    assert missing.returncode == 2 and b"no checkpoint" in missing.stderr
    model = str(tiny_pipeline / "results" / "train_model" / "crosstask")
    latin1 = _translate(model, stdin="Hola.\nAdi\u00f3s, se\u00f1or.\n".encode("latin-1"))
    assert latin1.returncode == 2 and b"stdin:2: not UTF-8" in latin1.stderr
    tag = _translate(model, "--target-lang", "fr", stdin=b"Hola.\n")
    assert tag.returncode == 2 and b"no tag <2fr>" in tag.stderr
    wrong = _translate(model, "--target-lang", "es", stdin=b"Hola.\n")
    assert wrong.returncode == 2 and b"translates into <2en>" in wrong.stderr
