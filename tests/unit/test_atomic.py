"""Atomic outputs (pipeline_lib/atomic.py): complete or absent, never half written."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_lib.atomic import atomic_output, write_text


def test_file_appears_only_when_the_block_succeeds(tmp_path: Path):
    target = tmp_path / "sub" / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_output(target) as tmp:
            tmp.write_text("half")
            assert not target.exists()
            raise RuntimeError("stage failed")
    assert not target.exists() and list((tmp_path / "sub").iterdir()) == []
    with atomic_output(target) as tmp:
        tmp.write_text("whole")
    assert target.read_text() == "whole" and list((tmp_path / "sub").iterdir()) == [target]


def test_failure_leaves_an_older_complete_output_untouched(tmp_path: Path):
    target = tmp_path / "manifest.json"
    write_text(target, "old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(target) as tmp:
            tmp.write_text("new, unfinished")
            raise KeyboardInterrupt
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_directory_is_replaced_whole(tmp_path: Path):
    target = tmp_path / "shards"
    (target / "old").mkdir(parents=True)
    with atomic_output(target) as tmp:
        (tmp / "train").mkdir(parents=True)
        (tmp / "train" / "shard-0.parquet").write_bytes(b"x")
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        "train", "train/shard-0.parquet"]
    with pytest.raises(ValueError):
        with atomic_output(target) as tmp:
            (tmp / "dev").mkdir(parents=True)
            raise ValueError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]
    assert (target / "train" / "shard-0.parquet").exists() and not (target / "dev").exists()
