"""score_test's plain-text hypotheses and references (issue 35, item 5): README's
`sacrebleu ref.txt -i <system>.txt -m bleu -b -w 2` on them prints the report's BLEU."""

from __future__ import annotations

import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_score import SACREBLEU, make_corpus

from pipeline_lib.evaluate import score
from pipeline_lib.manifest import Manifest


@pytest.mark.parametrize("n_refs", [1, 2])
def test_the_sacrebleu_command_on_the_text_files_gives_the_reports_bleu(tmp_path, n_refs):
    rows, poor, good = make_corpus(tmp_path, n_refs=n_refs)
    text = tmp_path / "text"
    out = score.score_all({"c": tmp_path / "docs.parquet"},
                          [(name, "c", "test", tmp_path / f"{name}.parquet")
                           for name in ("poor", "good")], "poor",
                          score.ScoreConfig(bootstrap_samples=20), Manifest("t"), text_dir=text)
    folder = text / "c" / "test"
    refs = ["ref.txt", "ref2.txt"][:n_refs]
    assert sorted(p.name for p in folder.iterdir()) == sorted([*refs, "good.txt", "poor.txt"])
    assert (folder / "ref.txt").read_text().splitlines() == [r["tgt"][0] for r in rows]
    for name in ("poor", "good"):
        printed = subprocess.run([str(SACREBLEU), *[str(folder / r) for r in refs], "-i",
                                  str(folder / f"{name}.txt"), "-m", "bleu", "-b", "-w", "2"],
                                 capture_output=True, text=True, check=True).stdout
        assert float(printed) == out["results"]["c/test"]["models"][name]["bleu"], name


def test_a_line_break_inside_a_segment_keeps_the_lines_aligned(tmp_path):
    rows, poor, _ = make_corpus(tmp_path, n_docs=3, per_doc=2)
    poor[1]["hyp"] = "two\nlines\r"
    pq.write_table(pa.Table.from_pylist(poor), tmp_path / "poor.parquet")
    manifest = Manifest("t")
    score.score_all({"c": tmp_path / "docs.parquet"},
                    [("poor", "c", "test", tmp_path / "poor.parquet")], "poor",
                    score.ScoreConfig(bootstrap_samples=20), manifest, text_dir=tmp_path / "text")
    lines = (tmp_path / "text" / "c" / "test" / "poor.txt").read_text().split("\n")
    assert len(lines) == len(rows) + 1 and lines[1] == "two lines "
    assert manifest.extra["text_line_breaks_replaced"] == 2
