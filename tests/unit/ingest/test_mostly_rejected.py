"""A file that is mostly quarantined stops ingestion with a diagnosis (issue 27 item 2):
``ingest.max_quarantined_share`` per file, compressed / zero-filled / another encoding / TSV /
markup said in the message (pipeline_lib.ingest.lines.check_files)."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import logging
import lzma
import random
import zipfile
from pathlib import Path

import pytest
from pipeline_lib.ingest.__main__ import main


def _words(n_lines: int, seed: int = 1) -> str:
    """English-like lines of random words: text that compresses to bytes, not to a few lines."""
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(3000)]
    return "".join(" ".join(rng.choice(vocab) for _ in range(rng.randint(5, 20))).capitalize()
                   + ".\n" for _ in range(n_lines))


def _ingest(tmp_path: Path, spec: dict, caplog, *extra: str) -> tuple[int, str]:
    out = tmp_path / "out"
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="ingest"):
        rc = main(["--corpus", "c", "--spec", json.dumps(spec), "--out-dir", str(out), *extra])
    if rc != 0:
        assert not (out / "docs.parquet").exists() and not (out / "manifest.json").exists()
    return rc, caplog.text


def _mono(path: Path) -> dict:
    return {"reader": "mono_text", "splits": {"mono": {"src": str(path)}}}


def _zip(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("news.2019.en", data)
    return buf.getvalue()


def test_an_xz_file_given_as_text_is_an_error_saying_it_is_compressed(tmp_path, caplog):
    path = tmp_path / "news.2019.en.xz"
    path.write_bytes(lzma.compress(_words(4000).encode()))
    rc, log = _ingest(tmp_path, _mono(path), caplog)
    assert rc == 2
    assert f"{path}: " in log and "xz-compressed" in log and "xz -d" in log
    assert "lines were quarantined" in log


@pytest.mark.parametrize("kind,pack", [("gzip", gzip.compress), ("bzip2", bz2.compress),
                                       ("zip", _zip)])
def test_other_compressions_are_named_by_their_magic_bytes(tmp_path, caplog, kind, pack):
    path = tmp_path / "news.2019.en"   # no .gz suffix: read as text
    path.write_bytes(pack(_words(4000).encode()))
    rc, log = _ingest(tmp_path, _mono(path), caplog)
    assert rc == 2 and f"{kind}-compressed" in log, log


def test_zstd_is_named_by_its_magic_bytes(tmp_path, caplog):
    zstd = pytest.importorskip("zstandard")
    path = tmp_path / "news.2019.en.zst"
    path.write_bytes(zstd.ZstdCompressor().compress(_words(4000).encode()))
    rc, log = _ingest(tmp_path, _mono(path), caplog)
    assert rc == 2 and "zstd-compressed" in log, log


def test_utf8_chinese_read_as_gb18030_is_an_error_naming_utf8(tmp_path, caplog):
    """LDC layout (per-document SGML, one folder per translator), the Chinese side in UTF-8 but
    configured as GB18030 (what the MTC releases use)."""
    rng = random.Random(3)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 2000)]
    src_dir, ref_dir = tmp_path / "source", tmp_path / "E01"
    src_dir.mkdir()
    ref_dir.mkdir()
    for d in range(2):
        docid = f"XIN2000010{d}.000{d}"
        src = [f'<DOC docid="{docid}" type="story">', "<TEXT>"]
        ref = [f'<DOC docid="{docid}" type="story">', "<TEXT>"]
        for i in range(1, 31):
            text = "".join(rng.choice(han) for _ in range(15)) + "。"
            if d == 0 and i <= 3:   # ASCII segments decode in any codec: kept, as in a release
                text = ["CCTV-4", "WTO 2006", "APEC"][i - 1]
            src.append(f"<seg id={i}>{text}</seg>")
            ref.append(f"<seg id={i}>{_words(1, seed=100 * d + i).strip()}</seg>")
        src += ["</TEXT>", "</DOC>", ""]
        ref += ["</TEXT>", "</DOC>", ""]
        (src_dir / f"XIN2000010{d}.sgm").write_bytes("\n".join(src).encode("utf-8"))
        (ref_dir / f"XIN2000010{d}.sgm").write_text("\n".join(ref), encoding="utf-8")
    spec = {"reader": "ldc_doc", "splits": {"train": {
        "src": str(src_dir / "*.sgm"), "tgt": [str(ref_dir / "*.sgm")], "src_encoding": "gb18030"}}}
    rc, log = _ingest(tmp_path, spec, caplog)
    assert rc == 2
    assert f"{src_dir / 'XIN20000100.sgm'}: 27 of its" in log
    assert "not gb18030 text but decodes as utf-8" in log
    spec["splits"]["train"]["src_encoding"] = "utf-8"   # configured right, it is read
    assert _ingest(tmp_path, spec, caplog)[0] == 0


def test_a_zero_filled_file_is_said_to_be_zero_filled_not_utf32(tmp_path, caplog):
    src, tgt = tmp_path / "train.es", tmp_path / "train.en"
    src.write_bytes(b"\0" * 65536)              # preallocated, never written
    tgt.write_text(_words(50))
    rc, log = _ingest(tmp_path, {"reader": "plaintext", "splits": {"train": {
        "src": str(src), "tgt": str(tgt)}}}, caplog)
    assert rc == 2 and f"{src}: is zero-filled" in log and "UTF-32" not in log, log


def test_a_tsv_release_given_as_one_side_is_an_error(tmp_path, caplog):
    """``es<TAB>en`` per line (a Tatoeba / ParaCrawl TSV) given as ``src``: no line is
    quarantined, every source would keep the English."""
    rng = random.Random(5)
    es = ["El perro come.", "La casa es grande.", "¿Dónde está la estación?", "Me gusta leer."]
    en = ["The dog eats.", "The house is big.", "Where is the station?", "I like reading."]
    rows = [rng.randrange(4) for _ in range(60)]
    src, tgt = tmp_path / "train.es", tmp_path / "train.en"
    src.write_text("".join(f"{es[i]}\t{en[i]}\n" for i in rows))
    tgt.write_text("".join(f"{en[i]}\n" for i in rows))
    rc, log = _ingest(tmp_path, {"reader": "plaintext", "splits": {"train": {
        "src": str(src), "tgt": str(tgt)}}, "hygiene": {"enabled": False}}, caplog)
    assert rc == 2 and f"{src}: 60 of its 60 lines hold a tab" in log and "cut -f1" in log, log


def test_markup_given_to_a_line_format_is_diagnosed_as_markup(tmp_path, caplog):
    """A NIST SGML file given to reader aspec (`` ||| `` fields): every line is field_count."""
    sgm = tmp_path / "dev.txt"
    lines = ['<srcset setid="mt06" srclang="en">']
    for d in range(2):
        lines += [f'<doc docid="AFP_ENG_2006010{d}.0001" genre="nw">', "<p>"]
        lines += [f'<seg id="{i}">{_words(1, seed=10 * d + i).strip()}</seg>' for i in range(1, 16)]
        lines += ["</p>", "</doc>"]
    sgm.write_text("\n".join(lines + ["</srcset>", ""]))
    rc, log = _ingest(tmp_path, {"reader": "aspec", "splits": {"dev": {"file": str(sgm)}}}, caplog)
    assert rc == 2 and f"{sgm}: " in log and "most lines are markup" in log, log


def test_a_few_bad_lines_are_quarantined_and_the_share_is_configurable(tmp_path, caplog):
    lines = _words(100).splitlines()
    for i in range(0, 100, 10):                  # 10 % with a NUL
        lines[i] = lines[i][:5] + "\0" + lines[i][5:]
    path = tmp_path / "news.en"
    path.write_text("\n".join(lines) + "\n")
    rc, log = _ingest(tmp_path, _mono(path), caplog)
    assert rc == 0, log
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["rejected"]["control_character"] == 10
    (tmp_path / "out").rename(tmp_path / "kept")
    rc, log = _ingest(tmp_path, _mono(path), caplog, "--max-quarantined-share", "0.05")
    assert rc == 2 and "10 of its 100 lines were quarantined" in log
    assert "ingest.max_quarantined_share (0.05)" in log


def test_gb18030_chinese_read_as_utf8_names_gb18030(tmp_path, caplog):
    """The other way round: an LDC sentence-aligned release in GB18030 (ldc_sent reads UTF-8)."""
    rng = random.Random(4)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 2000)]
    zh = ["".join(rng.choice(han) for _ in range(12)) + "。" for _ in range(60)]
    src, tgt = tmp_path / "sent.zh", tmp_path / "sent.en"
    src.write_bytes("".join(f"{z}\n" for z in zh).encode("gb18030"))
    tgt.write_text(_words(60))
    rc, log = _ingest(tmp_path, {"reader": "ldc_sent", "splits": {"train": {
        "src": str(src), "tgt": str(tgt)}}}, caplog)
    assert rc == 2 and f"{src}: 60 of its 60 lines" in log
    assert "decodes as gb18030" in log and "iconv -f gb18030 -t UTF-8" in log, log
