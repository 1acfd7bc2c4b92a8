"""Checkpoint directories: atomic replacement, crash recovery, load_model, averaging, RNG."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
import yaml

from pipeline_lib import checkpoint as ckpt
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.registry import build_model

CFG = ModelConfig(vocab_size=20, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1,
                  dropout=0.0, max_len=32)


def _state(value: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((2, 2), value), "n": torch.tensor(7)}


def test_save_replace_and_read(tmp_path):
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"spm-bytes")
    d = tmp_path / "ck" / "last"
    ckpt.save_checkpoint(d, _state(1.0), {"name": "x"}, {"lr": 1.0}, spm, {"step": 1})
    ckpt.save_checkpoint(d, _state(2.0), {"name": "x"}, {"lr": 1.0}, spm, {"step": 2})
    assert ckpt.load_state(d)["w"][0, 0] == 2.0
    assert ckpt.load_trainer_state(d)["step"] == 2
    assert (d / "spm.model").read_bytes() == b"spm-bytes"
    meta = ckpt.read_config(d)
    assert meta["model"] == {"name": "x"} and meta["train"] == {"lr": 1.0}
    assert "git_revision" in meta and meta["format_version"] == ckpt.FORMAT_VERSION
    # no temporary or backup directories are left behind
    assert sorted(p.name for p in d.parent.iterdir()) == ["last"]


def test_failed_write_leaves_old_checkpoint(tmp_path, monkeypatch):
    d = tmp_path / "last"
    ckpt.save_checkpoint(d, _state(1.0), {})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.yaml, "safe_dump", boom)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(d, _state(2.0), {})
    assert ckpt.load_state(ckpt.resolve_checkpoint(d))["w"][0, 0] == 1.0


def test_crash_between_renames_is_recovered(tmp_path):
    d = tmp_path / "last"
    ckpt.save_checkpoint(d, _state(3.0), {})
    os.replace(d, tmp_path / ".last.old")  # what a crash after the first rename leaves
    assert ckpt.resolve_checkpoint(d) == d
    assert ckpt.load_state(d)["w"][0, 0] == 3.0
    assert ckpt.resolve_checkpoint(tmp_path / "missing") is None


def test_sweep_tmp_removes_what_a_save_killed_midway_left(tmp_path):
    """Issue 27, item 7: `.<name>.tmp-<pid>` of a killed save goes; checkpoints, the backup of
    an unfinished replacement (restored by resolve_checkpoint) and other folders stay."""
    ck = tmp_path / "checkpoints"
    ckpt.save_checkpoint(ck / "last", _state(1.0), {})
    ckpt.save_checkpoint(ck / "best", _state(2.0), {})
    os.replace(ck / "best", ck / ".best.old")           # a crash between the two renames
    for name in (".step-4.tmp-123", ".last.tmp-99"):
        (ck / name).mkdir()
        (ck / name / ckpt.MODEL_FILE).write_bytes(b"half")
    (tmp_path / ".x.tmp-1").mkdir()                      # outside the folder swept
    assert [p.name for p in ckpt.sweep_tmp(ck)] == [".last.tmp-99", ".step-4.tmp-123"]
    assert sorted(p.name for p in ck.iterdir()) == [".best.old", "last"]
    assert (tmp_path / ".x.tmp-1").is_dir()
    assert ckpt.load_state(ckpt.resolve_checkpoint(ck / "best"))["w"][0, 0] == 2.0
    assert ckpt.sweep_tmp(tmp_path / "missing") == []


def test_load_model_round_trip(tmp_path):
    torch.manual_seed(0)
    model = build_model(CFG)
    ckpt.save_checkpoint(tmp_path / "best", model.state_dict(), CFG.to_dict())
    loaded, cfg = ckpt.load_model(tmp_path / "best")
    assert cfg == CFG and not loaded.training
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k


def test_average_states(tmp_path):
    paths = []
    for i, v in enumerate([1.0, 2.0, 6.0]):
        paths.append(ckpt.save_checkpoint(tmp_path / f"step-{i}", _state(v), {}))
    avg = ckpt.average_states(paths)
    assert torch.allclose(avg["w"], torch.full((2, 2), 3.0)) and int(avg["n"]) == 7
    ckpt.save_checkpoint(tmp_path / "odd", {"v": torch.zeros(1)}, {})
    with pytest.raises(ValueError, match="different parameter names"):
        ckpt.average_states([paths[0], tmp_path / "odd"])


def test_rng_state_round_trip():
    state = ckpt.rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1))
    ckpt.set_rng_state(state)
    b = (random.random(), np.random.rand(), torch.rand(1))
    assert a[:2] == b[:2] and torch.equal(a[2], b[2])


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_damaged_file_is_refused_by_name(tmp_path, damage):
    """Issue 36, item 1: a truncated trainer_state.pt used to end in torch's "PytorchStreamReader
    failed reading zip archive", naming no file. Every load checks the size and sha256 that
    config.yaml recorded when the checkpoint was written."""
    path = ckpt.save_checkpoint(tmp_path / "last", {"w": torch.arange(100.0)}, {"name": "t"},
                                trainer_state={"step": 3})
    assert set(ckpt.read_config(path)[ckpt.FILES_KEY]) == {"model.pt", "trainer_state.pt"}
    f = path / "trainer_state.pt"
    data = f.read_bytes()
    if damage == "truncate":
        f.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        f.unlink()
    said = {"truncate": "bytes where", "flip": "sha256", "delete": "missing"}[damage]
    with pytest.raises(ckpt.DamagedCheckpoint, match=said) as e:
        ckpt.verify(path)
    assert str(f) in str(e.value)
    if damage != "delete":   # load_trainer_state reads only a file that is there
        with pytest.raises(ckpt.DamagedCheckpoint, match=str(f)):
            ckpt.load_trainer_state(path)
    assert torch.equal(ckpt.load_state(path)["w"], torch.arange(100.0))   # the intact file


def test_an_unrecorded_checkpoint_that_torch_cannot_read_is_named(tmp_path):
    """A checkpoint written before the record (no `files` in config.yaml) is loaded unchecked;
    a file torch cannot read is still named."""
    path = ckpt.save_checkpoint(tmp_path / "old", {"w": torch.ones(3)}, {"name": "t"})
    meta = ckpt.read_config(path)
    del meta[ckpt.FILES_KEY]
    (path / ckpt.CONFIG_FILE).write_text(yaml.safe_dump(meta))
    (path / "model.pt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(ckpt.DamagedCheckpoint, match=f"{path / 'model.pt'}: unreadable"):
        ckpt.load_state(path)


def test_another_runs_tokenizer_is_refused_with_both_hashes(tmp_path):
    """Issue 36, item 2: an spm.model from another run crashed with IndexError or decoded
    through the wrong vocabulary. The checkpoint's own copy is recorded; another is refused."""
    own, other = tmp_path / "own.model", tmp_path / "other.model"
    own.write_bytes(b"pieces of this run")
    other.write_bytes(b"pieces of another run")
    path = ckpt.save_checkpoint(tmp_path / "final", build_model(CFG).state_dict(), CFG.to_dict(),
                                spm_model=own)
    ckpt.check_tokenizer(path, own)
    model, _ = ckpt.load_model(path, spm_model=path / ckpt.SPM_FILE)
    with pytest.raises(ckpt.DamagedCheckpoint, match="is not the tokenizer") as e:
        ckpt.load_model(path, spm_model=other)
    digest = ckpt.file_record(other)["sha256"][:16]
    assert str(other) in str(e.value) and digest in str(e.value)
