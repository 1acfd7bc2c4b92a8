from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline_lib.preprocess.noise import iter_units
from pipeline_lib.tables import DOC_SCHEMA, Sentence, doc_writer

DOC_KEY = ("corpus", "split", "doc_id")


def _rows():
    for d in range(3):
        for i in range(4 + d):
            yield Sentence("c", "train", f"d{d}", i, f"src {d} {i}", [f"tgt {d} {i}"],
                           origin_file="f", origin_line=10 * d + i + 1)


def test_round_trip_streams_documents_across_row_groups(tmp_path: Path):
    path = tmp_path / "docs.parquet"
    with doc_writer(path, row_group_size=2) as w:
        w.write_all(_rows())
    assert w.count == 4 + 5 + 6
    pf = pq.ParquetFile(path)
    assert pf.schema_arrow == DOC_SCHEMA
    assert pf.metadata.num_row_groups == 8  # 15 rows in groups of 2
    docs = list(iter_units(path, DOC_KEY))
    assert [len(d) for d in docs] == [4, 5, 6]
    assert [r["sent_idx"] for r in docs[2]] == list(range(6))
    assert docs[1][0]["tgt"] == ["tgt 1 0"]


def test_empty_writer_leaves_a_valid_file(tmp_path: Path):
    path = tmp_path / "empty.parquet"
    with doc_writer(path):
        pass
    assert pq.read_table(path).num_rows == 0
    assert list(iter_units(path, DOC_KEY)) == []


def test_failure_while_writing_leaves_no_file(tmp_path: Path):
    """A reader that raises halfway: no docs.parquet with the rows read so far (issue 11, item 6)."""
    path = tmp_path / "docs.parquet"

    def rows_then_error():
        yield from _rows()
        raise ValueError("input ends in the middle of a segment")

    with pytest.raises(ValueError):
        with doc_writer(path, row_group_size=2) as w:
            w.write_all(rows_then_error())
    assert list(tmp_path.iterdir()) == []
