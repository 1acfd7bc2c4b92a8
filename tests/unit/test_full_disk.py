"""Issue 36 item 6: a full disk (or quota) while a stage writes is one line naming the file,
exit 2, and no partial output; an older complete output is kept. The disk is /dev/full, whose
writes fail with ENOSPC as a full filesystem's do."""

from __future__ import annotations

import errno

import pytest

from pipeline_lib.atomic import DiskFullError, atomic_output, exits_on_full_disk


def _fill(tmp):
    """Write to ``tmp`` as a stage does, then meet a full disk (a real ENOSPC)."""
    tmp.write_text("half of it")
    with open("/dev/full", "w") as full:
        full.write("x" * 65536)
        full.flush()


def test_a_full_disk_names_the_output_and_leaves_the_old_one(tmp_path):
    out = tmp_path / "shards" / "docs.parquet"
    out.parent.mkdir()
    out.write_text("complete older output")
    with pytest.raises(DiskFullError) as e, atomic_output(out) as tmp:
        _fill(tmp)
    assert e.value.errno == errno.ENOSPC
    assert str(e.value).startswith(f"{out}: No space left on device while writing it")
    assert f"df -h {out.parent}" in str(e.value)
    assert out.read_text() == "complete older output"
    assert sorted(p.name for p in out.parent.iterdir()) == ["docs.parquet"]   # no partial


def test_the_innermost_output_is_named_when_outputs_nest(tmp_path):
    outer, inner = tmp_path / "dir", tmp_path / "dir.partial-x" / "inner.parquet"
    with pytest.raises(DiskFullError, match="inner.parquet: No space"), \
            atomic_output(outer) as tmp_outer, atomic_output(inner) as tmp:
        tmp_outer.mkdir()
        _fill(tmp)
    assert not outer.exists()


def test_a_stage_main_says_it_in_one_line_and_exits_2(tmp_path, capsys):
    out = tmp_path / "hyps.parquet"

    @exits_on_full_disk
    def main() -> int:
        with atomic_output(out) as tmp:
            _fill(tmp)
        return 0

    assert main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {out}: No space left on device")
    assert not list(tmp_path.iterdir())


def test_a_full_disk_outside_an_atomic_output_still_names_its_file(capsys):
    @exits_on_full_disk
    def main() -> int:
        with open("/dev/full", "w") as log:
            log.write("x" * 65536)
            log.flush()
        return 0

    assert main() == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "No space left on device while writing it" in err


def test_other_os_errors_are_not_taken_for_a_full_disk(tmp_path):
    @exits_on_full_disk
    def main() -> int:
        open(tmp_path / "missing" / "x")
        return 0

    with pytest.raises(FileNotFoundError):
        main()
