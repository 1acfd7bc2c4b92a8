"""``python -m pipeline_lib.export ctranslate2`` on a checkpoint trained here for a few dozen steps:
the CTranslate2 model decodes greedily token for token as our ``greedy_search``, scores every
target token as our model does, carries its vocabulary and manifest, and context models (and
dbsa, whose parse head changes decoding) are refused with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ctranslate2   # the test extra installs it (pyproject.toml)
import pytest
import torch

from pipeline_lib.vocab import BOS_ID, EOS_ID
from pipeline_lib.evaluate.decode import read_shards
from pipeline_lib.export.ctranslate2 import spm_pieces, translate_ids
from pipeline_lib.manifest import sha256_file
from pipeline_lib.models import ModelConfig, build_model
from pipeline_lib.models.search import BeamConfig, greedy_search, source_batch
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.train_config import TrainConfig
from pipeline_lib.training.train import train

from test_data import write_corpus  # tests/unit/training: the shared shard builder

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TINY = {"name": "transformer", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 2,
        "dec_layers": 2, "dropout": 0.0, "max_len": 64}


def _export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline_lib.export", "ctranslate2", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, Path]:
    """A transformer trained 40 steps on the copy corpus (test_data.write_corpus) and its
    200-sentence dev shards."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("export")
    shards, spm_model = write_corpus(root / "train")
    dev, _ = write_corpus(root / "dev", n_rows=200, n_shards=1, seed=9, spm_model=spm_model)
    cfg = TrainConfig(max_tokens=500, max_steps=40, warmup=10, lr=5e-3, validate_every=40,
                      save_every=40, log_every=10, dev_bleu=False)
    assert train(TINY, cfg, shards, dev, spm_model, root / "job") == 0
    return root / "job", dev


@pytest.fixture(scope="module")
def exported(job, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ct2") / "model"
    result = _export(str(job[0]), "--output", str(out), "--checkpoint", "best")
    assert result.returncode == 0, result.stderr
    return out


def _translator(path: Path):
    return ctranslate2.Translator(str(path), device="cpu", intra_threads=1)


def test_greedy_decoding_is_token_for_token_ours(job, exported):
    """All 200 dev sentences. CTranslate2 takes one max length per call, so sentences of equal
    length (equal limits) are decoded together, in batches."""
    model, cfg = ckpt.load_model(job[0] / "checkpoints" / "best")
    pieces = spm_pieces(exported / "spm.model")
    translator = _translator(exported)
    search = BeamConfig(greedy=True)
    srcs = [list(r["src_ids"]) for r in read_shards(job[1])]
    by_len: dict[int, list[list[int]]] = {}
    for s in srcs:
        by_len.setdefault(len(s), []).append(s)
    ours, theirs = [], []
    for group in by_len.values():
        ours += [h[0].tokens for h in greedy_search(model, source_batch(group), search)]
        theirs += translate_ids(translator, group, search, cfg.max_len, pieces)
    assert len(ours) == len(srcs) == 200
    assert sum(o == t for o, t in zip(ours, theirs)) == len(srcs)
    assert sum(len(o) > 0 for o in ours) > 150        # real outputs, not empty ones


def _teacher_forced_gap(model: torch.nn.Module, translator, pieces: list[str],
                        pairs: list[tuple[list[int], list[int]]]) -> float:
    """Largest |log p| difference over every target token (EOS included) of ``pairs``."""
    results = translator.score_batch([[pieces[i] for i in s] for s, _ in pairs],
                                     [[pieces[i] for i in t] for _, t in pairs])
    gap = 0.0
    for (src, tgt), result in zip(pairs, results):
        with torch.no_grad():
            logits = model.decode(torch.tensor([[BOS_ID] + tgt]), model.encode(source_batch([src])))
        lp = torch.log_softmax(logits, -1)[0]
        ours = [float(lp[k, tok]) for k, tok in enumerate(tgt + [EOS_ID])]
        assert len(result.log_probs) == len(ours)
        gap = max(gap, max(abs(a - b) for a, b in zip(ours, result.log_probs)))
    return gap


def test_every_target_token_scores_as_ours(job, exported):
    model, _ = ckpt.load_model(job[0] / "checkpoints" / "best")
    srcs = [list(r["src_ids"]) for r in read_shards(job[1])][:20]
    pairs = [(s, s[::-1]) for s in srcs]
    assert _teacher_forced_gap(model, _translator(exported), spm_pieces(exported / "spm.model"),
                               pairs) < 1e-5


@pytest.mark.parametrize("variant", [{"norm_first": True}, {"share_embeddings": False}],
                         ids=["pre-norm", "untied"])
def test_other_layouts_convert(job, tmp_path, variant):
    """Pre-norm (final LayerNorms) and separate source/target/output matrices."""
    torch.manual_seed(3)
    spm_model = job[0] / "checkpoints" / "best" / "spm.model"
    cfg = ModelConfig.from_dict({**TINY, **variant, "vocab_size": len(spm_pieces(spm_model))})
    model = build_model(cfg).eval()
    ckpt.save_checkpoint(tmp_path / "ck", model.state_dict(), cfg.to_dict(), spm_model=spm_model)
    result = _export(str(tmp_path / "ck"), "--output", str(tmp_path / "ct2"))
    assert result.returncode == 0, result.stderr
    pairs = [([5, 9, 12, 7], [8, 6, 30]), ([40, 41], [11, 12, 13, 14, 15])]
    assert _teacher_forced_gap(model, _translator(tmp_path / "ct2"),
                               spm_pieces(spm_model), pairs) < 1e-5


def test_directory_is_self_contained(job, exported):
    source = job[0] / "checkpoints" / "best"
    assert sha256_file(exported / "spm.model") == sha256_file(source / "spm.model")
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["source_sha256"] == sha256_file(source / "model.pt")
    assert manifest["source_checkpoint"] == str(source.resolve())
    assert manifest["ctranslate2_version"] == ctranslate2.__version__
    assert manifest["params"] == {"checkpoint": "best", "quantization": "float32"}
    vocab = json.loads((exported / "shared_vocabulary.json").read_text())
    assert vocab == spm_pieces(source / "spm.model")


def test_quantized_export_translates(job, tmp_path):
    out = tmp_path / "int8"
    assert _export(str(job[0]), "--output", str(out), "--quantization", "int8").returncode == 0
    assert json.loads((out / "manifest.json").read_text())["params"]["quantization"] == "int8"
    pieces = spm_pieces(out / "spm.model")
    hyp = translate_ids(_translator(out), [[5, 6, 7]], BeamConfig(beam=4), TINY["max_len"], pieces)
    assert len(hyp) == 1


@pytest.mark.parametrize("name,reason", [
    ("doct", "doct: not exportable to CTranslate2: Transformer + context encoder"),
    ("cache", "cache: not exportable to CTranslate2: Transformer + continuous cache"),
    ("dbsa", "dbsa: not exportable to CTranslate2: its parse heads change decoding: the last "
             "head of encoder layer 1 and of decoder layer 1")])
def test_models_that_ctranslate2_cannot_run_are_refused(tmp_path, name, reason):
    cfg = ModelConfig.from_dict({**TINY, "name": name, "vocab_size": 50})
    ckpt.save_checkpoint(tmp_path / "ck", build_model(cfg).state_dict(), cfg.to_dict())
    result = _export(str(tmp_path / "ck"), "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"export: {reason}"), result.stderr
    assert not (tmp_path / "out").exists()


def test_a_transformer_with_language_tags_is_refused(tmp_path):
    """Chen et al. (2021) Table 1 #4's Transformer reads a target-language tag before every
    source sentence (extras.lang_tags); CTranslate2's TransformerSpec would translate without
    it, so the export says why it refuses."""
    cfg = ModelConfig.from_dict({**TINY, "vocab_size": 50, "extras": {"lang_tags": True}})
    ckpt.save_checkpoint(tmp_path / "ck", build_model(cfg).state_dict(), cfg.to_dict())
    result = _export(str(tmp_path / "ck"), "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.startswith("export: transformer: not exportable to CTranslate2: "
                                    "language tags (extras.lang_tags)"), result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_checkpoint_is_an_error(tmp_path):
    result = _export(str(tmp_path), "--output", str(tmp_path / "out"))
    assert result.returncode == 2 and "no checkpoint there" in result.stderr
