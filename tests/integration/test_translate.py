"""``translate`` on the tiny pipeline's trained models: a two-document text comes back with the
same layout, and for the same input the hypotheses are the strings rule decode_test wrote, for
every registered model: the sentence-level ones (transformer, DBSA), the context models, the
cache (history) and cross-task (both units)."""

from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
    """A checkpoint folder of an untrained transformer (64 positions) with a real sentencepiece
    model: enough for what ``translate`` checks before and around decoding, without the tiny
    pipeline's training run."""
    import random

    import sentencepiece as spm
    import torch

    from pipeline_lib.checkpoint import save_checkpoint
    from pipeline_lib.models import ModelConfig, build_model
    from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID

    d = tmp_path_factory.mktemp("random_model")
    rng = random.Random(0)
    words = ["casa", "perro", "gato", "verde", "rojo", "grande", "la", "el", "come", "es"]
    (d / "text.txt").write_text("\n".join(" ".join(rng.choices(words, k=6)) for _ in range(300)))
    spm.SentencePieceTrainer.train(input=str(d / "text.txt"), model_prefix=str(d / "m"),
                                   vocab_size=30, pad_id=PAD_ID, unk_id=1, bos_id=BOS_ID,
                                   eos_id=EOS_ID, minloglevel=2)
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                      dropout=0.0, max_len=64)
    model = build_model(cfg)
    return save_checkpoint(d / "final", model.state_dict(), cfg.to_dict(), spm_model=d / "m.model")


@pytest.mark.parametrize("text,where", [(b"La casa es verde.\nEl perro\x00 come.\n", b"stdin:2:"),
                                        (b"El gato\x1b[31m come.\n", b"stdin:1:"),
                                        ("La casa\u009b es roja.\n".encode(), b"stdin:1:")])
def test_control_characters_are_refused_with_their_line(random_checkpoint, text, where):
    """NUL, ESC, C1: what ingestion quarantines (control_character) is refused, not translated."""
    out = _translate(str(random_checkpoint), *SEARCH, stdin=text)
    assert out.returncode == 2 and where in out.stderr and b"control character" in out.stderr, \
        out.stderr.decode()[-2000:]
    assert out.stdout == b""


def test_control_characters_in_a_file_name_the_file(random_checkpoint, tmp_path):
    src = tmp_path / "in.es"
    src.write_bytes(b"La casa.\n\nEl perro come.\nEl gato\x07 come.\n")
    out = _translate(str(random_checkpoint), "-i", str(src), *SEARCH)
    assert out.returncode == 2 and f"{src}:4: control character U+0007".encode() in out.stderr


def test_a_line_longer_than_the_models_positions_is_refused_not_cut(random_checkpoint):
    long = " ".join(["la casa es verde y el perro come"] * 40)   # some 300 pieces; 64 positions
    out = _translate(str(random_checkpoint), *SEARCH, stdin=f"El gato.\n\n{long}\n".encode())
    assert out.returncode == 2 and b"stdin:3:" in out.stderr and b"the model reads" in out.stderr, \
        out.stderr.decode()[-2000:]
    ok = _translate(str(random_checkpoint), *SEARCH, stdin=b"El gato.\n\nLa casa es verde.\n")
    assert ok.returncode == 0, ok.stderr.decode()[-2000:]
    assert len(ok.stdout.decode().split("\n")[:-1]) == 3


def test_a_reader_quarantines_control_characters_and_says_how_many(random_checkpoint, tmp_path):
    """Through ``--reader`` the reader's own quarantine applies; its count is on stderr."""
    src, tgt = tmp_path / "test.es", tmp_path / "test.en"
    src.write_bytes(b"La casa es verde.\nEl perro\x00 come.\nEl gato come.\n")
    tgt.write_bytes(b"The house is green.\nThe dog eats.\nThe cat eats.\n")
    spec = {"splits": {"test": {"src": str(src), "tgt": str(tgt)}}}
    out = _translate(str(random_checkpoint), *SEARCH, "--reader", "plaintext", "--spec",
                     json.dumps(spec))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert b"quarantined 1 records" in out.stderr and b"'control_character': 1" in out.stderr
    assert len(out.stdout.decode().split("\n")[:-1]) == 2


def test_a_damaged_checkpoint_is_refused_by_name(random_checkpoint, tmp_path):
    """Issue 36, item 1: a truncated model.pt given to translate ended in torch's zip-archive
    stack; it is refused in one line naming the file, exit 2."""
    import shutil

    damaged = tmp_path / "final"
    shutil.copytree(random_checkpoint, damaged)
    model = damaged / "model.pt"
    model.write_bytes(model.read_bytes()[:-100])
    out = _translate(str(damaged), stdin=b"La casa es verde.\n")
    assert out.returncode == 2 and b"Traceback" not in out.stderr, out.stderr
    assert f"{model}: damaged checkpoint file".encode() in out.stderr
