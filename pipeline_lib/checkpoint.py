"""Self-describing checkpoint directories, written atomically, and checkpoint averaging.

A checkpoint is a DIRECTORY (Sockeye/nanoGPT style) so that ``load_model(dir)`` needs nothing
else: ``model.pt`` (state_dict), ``config.yaml`` (model config, effective train config, git
revision, format version), ``spm.model`` (copy of the subword model) and, for runs that can be
resumed, ``trainer_state.pt`` (optimizer, scheduler, RNG states, data position, step).

Integrity: ``config.yaml`` records the size and sha256 of every other file as written
(``files``); every load checks the file it reads against them and refuses a damaged one by name
(:class:`DamagedCheckpoint`): a truncated copy, a full disk, a node lost outside the atomic
path. Checkpoints written before the record are loaded unchecked, and a file torch cannot read
is refused by name all the same.

Atomicity: everything is written into a hidden temporary sibling directory
(``.<name>.tmp-<pid>``), which is then renamed into place. Replacing an existing directory takes
two renames (old -> backup, new -> name); a crash between them leaves the backup, which
``resolve_checkpoint`` renames back. A reader never sees a half-written checkpoint. A kill in
mid-save leaves the temporary directory, which no later save reuses (another pid):
:func:`sweep_tmp` removes them when the trainer starts.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from pipeline_lib.layout import CHECKPOINT_DIR, CKPT_FINAL
from pipeline_lib.manifest import git_revision

FORMAT_VERSION = 1
MODEL_FILE = "model.pt"                # state_dict
CONFIG_FILE = "config.yaml"            # model config, train config, git revision
SPM_FILE = "spm.model"                 # copy of the sentencepiece model


def truecaser_file(lang: str) -> str:
    """The copy of a pre-tokenized run's truecaser for ``lang`` in its checkpoints."""
    return f"truecase.{lang}.model"

TRAINER_STATE_FILE = "trainer_state.pt"  # optimizer, scheduler, RNG, data position, step
FILES_KEY = "files"                    # config.yaml: {file: {bytes, sha256}} as written


class DamagedCheckpoint(ValueError):
    """A checkpoint file is not what was written (size, sha256) or cannot be read."""


def file_record(path: Path) -> dict[str, Any]:
    """Size and sha256 of one file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def verify(path: str | Path, names: Sequence[str] | None = None) -> None:
    """Refuse (DamagedCheckpoint, naming the file) a checkpoint file whose size or sha256 is not
    the one recorded when it was written; ``names``: only these files (default: all)."""
    path = Path(path)
    try:
        meta = read_config(path)
    except (OSError, yaml.YAMLError) as e:
        raise DamagedCheckpoint(f"{path / CONFIG_FILE}: unreadable checkpoint config "
                                f"({e})") from None
    files = (meta or {}).get(FILES_KEY, {})
    for name, want in files.items():
        if names is not None and name not in names:
            continue
        f = path / name
        if not f.is_file():
            raise DamagedCheckpoint(f"{f}: missing from the checkpoint ({want['bytes']} bytes "
                                    "when written)")
        size = f.stat().st_size
        if size != want["bytes"]:
            raise DamagedCheckpoint(f"{f}: damaged checkpoint file, {size} bytes where "
                                    f"{want['bytes']} were written (truncated or cut short)")
        if file_record(f)["sha256"] != want["sha256"]:
            raise DamagedCheckpoint(f"{f}: damaged checkpoint file, its sha256 is not the one "
                                    "recorded when it was written")


def check_tokenizer(path: str | Path, spm_model: str | Path) -> None:
    """Refuse a sentencepiece model other than the one checkpoint ``path`` was trained with (its
    own copy's sha256, recorded when written): pieces of another vocabulary index the wrong
    embeddings, or none (IndexError), and decode through the wrong pieces without a word."""
    want = ((read_config(path) or {}).get(FILES_KEY) or {}).get(SPM_FILE)
    if want is None:   # written before the record, or without a tokenizer copy
        return
    got = file_record(Path(spm_model))["sha256"]
    if got != want["sha256"]:
        raise DamagedCheckpoint(
            f"{spm_model} (sha256 {got[:16]}...) is not the tokenizer {path} was trained with "
            f"(sha256 {want['sha256'][:16]}...; its own copy is {Path(path) / SPM_FILE})")


def _torch_load(f: Path, weights_only: bool, device: str | torch.device = "cpu") -> Any:
    """``torch.load`` of one checkpoint file, checked first; an unreadable one is named."""
    verify(f.parent, [f.name])
    try:
        return torch.load(f, map_location=device, weights_only=weights_only)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise DamagedCheckpoint(f"{f}: unreadable checkpoint file ({e})") from None


def _backup_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def resolve_checkpoint(path: str | Path) -> Path | None:
    """The checkpoint directory at ``path`` if complete, restoring a backup left by a crash
    between the two renames of a replacement; ``None`` when there is none."""
    path = Path(path)
    backup = _backup_path(path)
    if not path.exists() and backup.exists():
        os.replace(backup, path)
    if (path / MODEL_FILE).exists() and (path / CONFIG_FILE).exists():
        return path
    return None


def find_checkpoint(source: str | Path, which: str = CKPT_FINAL) -> Path:
    """``source`` itself when it is a checkpoint folder, else ``source/checkpoints/<which>`` of a
    training job's folder (``results/train_model/<job>``): what translate and export accept.
    Raises ValueError naming both places."""
    source = Path(source)
    for candidate in (source, source / CHECKPOINT_DIR / which):
        found = resolve_checkpoint(candidate)
        if found is not None:
            return found
    raise ValueError(f"{source}: no checkpoint there nor in {source / CHECKPOINT_DIR / which} "
                     "(a training job's folder, results/train_model/<job>, or a checkpoint "
                     "folder with model.pt and config.yaml)")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fresh_tmp(path: Path) -> Path:
    """The hidden sibling a new version of ``path`` is built in (emptied first)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def sweep_tmp(folder: str | Path) -> list[Path]:
    """Remove the temporary directories (``.<name>.tmp-<pid>``) that saves killed midway left
    directly in ``folder``; backups (``.<name>.old``) stay for :func:`resolve_checkpoint`. Call
    it only where no save is under way. Returns what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    stale = sorted(p for p in folder.glob(".*.tmp-*") if p.is_dir() and not p.is_symlink())
    for p in stale:
        shutil.rmtree(p)
    return stale


def _swap_in(tmp: Path, path: Path) -> Path:
    """Put the finished ``tmp`` at ``path``: old -> backup, tmp -> path, drop the backup. A crash
    between the two renames leaves the backup, which :func:`resolve_checkpoint` restores."""
    backup = _backup_path(path)
    if backup.exists():
        shutil.rmtree(backup)
    if path.exists():
        os.replace(path, backup)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    if backup.exists():
        shutil.rmtree(backup)
    return path


def save_checkpoint(
    path: str | Path,
    model_state: dict[str, torch.Tensor],
    model_config: dict[str, Any],
    train_config: dict[str, Any] | None = None,
    spm_model: str | Path | None = None,
    trainer_state: dict[str, Any] | None = None,
    extra_files: Mapping[str, str | Path] | None = None,
) -> Path:
    """Write a checkpoint directory atomically (temp dir + rename) and return its path.
    ``extra_files`` (name in the checkpoint -> file): what else the model needs to translate
    raw text, as the sentencepiece model (the truecasers of a pre-tokenized run)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _fresh_tmp(path)
    tmp.mkdir()
    torch.save(model_state, tmp / MODEL_FILE)
    if spm_model is not None:
        shutil.copyfile(spm_model, tmp / SPM_FILE)
    for name, f in (extra_files or {}).items():
        shutil.copyfile(f, tmp / name)
    if trainer_state is not None:
        torch.save(trainer_state, tmp / TRAINER_STATE_FILE)
    meta = {"format_version": FORMAT_VERSION, "git_revision": git_revision(),
            "model": model_config, "train": train_config or {},
            FILES_KEY: {f.name: file_record(f) for f in sorted(tmp.iterdir())}}
    (tmp / CONFIG_FILE).write_text(yaml.safe_dump(meta, sort_keys=False))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)
    return _swap_in(tmp, path)


def copy_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """Atomically copy a checkpoint directory (e.g. ``last`` -> ``best``)."""
    src, dst = Path(src), Path(dst)
    tmp = _fresh_tmp(dst)
    shutil.copytree(src, tmp)
    return _swap_in(tmp, dst)


def link_checkpoint(src: str | Path, dst: str | Path) -> Path:
    """``dst`` as a second name of checkpoint ``src``: hard links where the filesystem allows
    (no second copy of the weights on disk), else copies; atomic like :func:`copy_checkpoint`."""
    src, dst = Path(src), Path(dst)
    tmp = _fresh_tmp(dst)
    tmp.mkdir(parents=True)
    for f in src.iterdir():
        try:
            os.link(f, tmp / f.name)
        except OSError:
            shutil.copy2(f, tmp / f.name)
    return _swap_in(tmp, dst)


def read_config(path: str | Path) -> dict[str, Any]:
    return yaml.safe_load((Path(path) / CONFIG_FILE).read_text())


def training_seed(path: str | Path) -> int:
    """The seed the checkpoint's run trained with: every reader of a model whose context rule
    draws at random (decoding, translate, CXMI) draws with it, so it draws what training drew."""
    return int(read_config(resolve_checkpoint(path) or path).get("train", {}).get("seed", 1))


def load_state(path: str | Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    return _torch_load(Path(path) / MODEL_FILE, weights_only=True, device=device)


def load_trainer_state(path: str | Path) -> dict[str, Any] | None:
    f = Path(path) / TRAINER_STATE_FILE
    # Our own file: it holds numpy RNG state, which the weights-only unpickler refuses.
    return _torch_load(f, weights_only=False) if f.exists() else None


def load_model(path: str | Path, device: str | torch.device = "cpu",
               spm_model: str | Path | None = None):
    """Rebuild the model a checkpoint directory describes: ``(model in eval mode, ModelConfig)``.
    Its weights and tokenizer copy are checked (:func:`verify`), and ``spm_model``, the
    tokenizer a caller will use with it, against that copy (:func:`check_tokenizer`)."""
    from pipeline_lib.models.config import ModelConfig
    from pipeline_lib.models.registry import build_model

    given, path = path, resolve_checkpoint(path)
    if path is None:
        raise FileNotFoundError(f"no complete checkpoint (model.pt + config.yaml) at {given}")
    verify(path, [MODEL_FILE, SPM_FILE])
    if spm_model is not None:
        check_tokenizer(path, spm_model)
    cfg = ModelConfig.from_dict(read_config(path)["model"])
    model = build_model(cfg)
    model.load_state_dict(load_state(path))
    return model.to(device).eval(), cfg


def average_states(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the floating-point parameters of several checkpoints (fairseq's
    ``average_checkpoints.py``); accumulated in float64, cast back to each tensor's dtype.
    Integer buffers are taken from the last checkpoint."""
    if not paths:
        raise ValueError("average_states: no checkpoints given")
    states = [load_state(p) for p in paths]
    keys = states[0].keys()
    for p, s in zip(paths, states):
        if s.keys() != keys:
            raise ValueError(f"average_states: {p} has different parameter names than {paths[0]}")
    out = {}
    for k in keys:
        t = states[-1][k]
        if t.is_floating_point():
            out[k] = (sum(s[k].double() for s in states) / len(states)).to(t.dtype)
        else:
            out[k] = t.clone()
    return out


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from, so a resumed run draws the same numbers."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
