"""Every registered model trains under DDP (``torchrun --nproc-per-node 2``, gloo on CPU) and ends
with the weights of single-process training on the same global batch.

Same global batch: the loader deals its shuffled work units round-robin to the ``world_size``
ranks, and a rank's batches do not depend on its DataLoader workers (they only compute chunks
ahead: :func:`test_ranks_read_disjoint_data_whatever_their_workers`). The reference is what DDP
promises to compute: two replicas of the model (each with its own document streams, for the
cache), replica r reading ``TrainLoader(rank=r, world_size=2)`` (the loader of DDP rank r) on the
steps of the model's schedule, their gradients summed and divided by the global target-token
count, one step of the trainer's Adam and schedule (:func:`replica_reference`).

Setups: every job of config/config.yaml's ``models`` and the jobs they start from, read from
its ``model_settings`` (:func:`config_setups`): the registry name, extras, ``freeze``, whether
the job starts from another job's checkpoint, its data (``heads`` shards for DBSA, so its source
and target parse losses run under DDP; ``doc`` for the context models; CAMN in its default
memory with every parameter trained), and its second stream (cross-task pre-training with
restoration batches, ``aux: restore``, and its fine-tuning with parallel-document batches,
``aux: doc``, both on half of the updates, which leaves modules unused on some steps:
DistributedDataParallel needs ``find_unused_parameters`` there). Sizes and step counts are this
test's (one-layer models, 4 updates); the parse layer maps to layer 1 of 1. One job is not in
the config: cross-task on sentence batches alone (its document modules never used). Dropout is
0, so nothing random differs between the runs.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
import torch
import yaml

from pipeline_lib.batch import Batch
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.inputs import Phase, inputs_for
from pipeline_lib.models.registry import MODELS, build_model
from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader
from pipeline_lib.training.optim import build_optimizer, build_scheduler, label_smoothed_nll
from pipeline_lib.training.train_config import TrainConfig
from pipeline_lib.training.two_step import apply_freeze, init_from_checkpoint
from pipeline_lib.training.train import train

from test_data import write_doc_corpus  # tests/unit/training: the shared shard builder

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4
MODEL = {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1, "dec_layers": 1,
         "dropout": 0.0, "max_len": 64}
#: The ranks read without workers: workers change no batch (test_ranks_read_disjoint_data...).
TRAIN = TrainConfig(max_tokens=100, max_steps=STEPS, warmup=2, validate_every=2, save_every=2,
                    log_every=1, dev_bleu=False, device="cpu", num_workers=0)


@dataclass(frozen=True)
class Job:
    """A training job: the model, its extras, what it starts from and freezes, its shards."""

    model: str
    extras: dict = field(default_factory=dict)
    init_from: str | None = None    # a job whose checkpoint the fixture trains first
    freeze: tuple[str, ...] = ()
    data: str = "sent"              # sent | doc | heads
    aux: str | None = None          # restore | doc: a second stream on aux_ratio of the updates
    aux_ratio: float = 0.0


def config_setups() -> dict[str, Job]:
    """The jobs of config/config.yaml's ``models`` and of their ``init_from`` chains, as its
    ``model_settings`` train them (module docstring)."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    settings = config["model_settings"]
    jobs: dict[str, Job] = {}
    todo = list(config["models"])
    while todo:
        name = todo.pop()
        s = settings.get(name, {})
        jobs[name] = Job(s.get("name", name), dict(s.get("extras", {})), s.get("init_from"),
                         tuple(s.get("freeze", ())), s.get("data", "sent"), s.get("aux"),
                         s.get("aux_ratio", 0.0) if s.get("aux") else 0.0)
        if s.get("init_from") and s["init_from"] not in jobs:
            todo.append(s["init_from"])
    return jobs


SETUPS = config_setups()
#: Sentence batches only: crosstask's document modules are never used (DDP must know).
JOBS = {**SETUPS, "crosstask_sentences": Job("crosstask", dict(SETUPS["crosstask"].extras))}


def test_the_setups_are_the_default_runs():
    """What this file trains is config.yaml's: DBSA on parsed shards from the baseline, CAMN in
    its default memory with nothing frozen, cross-task pre-trained with restoration and then
    fine-tuned with parallel documents."""
    assert set(MODELS) <= set(SETUPS)
    assert SETUPS["dbsa"].data == "heads" and SETUPS["dbsa"].init_from == "transformer"
    assert SETUPS["camn"].extras["memory_mode"] == "concat" and not SETUPS["camn"].freeze
    assert SETUPS["crosstask"].aux == "doc" and SETUPS["crosstask"].init_from == "crosstask_pretrain"
    assert SETUPS["crosstask_pretrain"].aux == "restore"


def with_heads(doc: Path, out: Path) -> Path:
    """The doc shards with gold subword heads on both sides (each piece headed by the one before
    it, the first piece the root), as make_shards writes the ``heads`` shards of parsed pairs."""
    out.mkdir()
    for path in sorted(doc.glob("*.parquet")):
        table = pq.read_table(path)
        if "src_ids" in table.column_names:
            chain = [[max(i - 1, 0) for i in range(len(ids))] for ids in table["src_ids"].to_pylist()]
            tgt = [[max(i - 1, 0) for i in range(len(ids))] for ids in table["tgt_ids"].to_pylist()]
            names = table.column_names
            table = table.set_column(names.index("src_heads"), "src_heads",
                                     pa.array(chain, table.schema.field("src_heads").type))
            table = table.set_column(names.index("tgt_heads"), "tgt_heads",
                                     pa.array(tgt, table.schema.field("tgt_heads").type))
        pq.write_table(table, out / path.name, row_group_size=7)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Doc, heads and restoration shards, dev shards, the sentencepiece model, and the
    checkpoints the config's jobs start from (2 updates each): the sentence-level baseline and
    cross-task's pre-training."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ddp")
    doc, restore, spm_model = write_doc_corpus(root / "train", n_docs=40)
    dev, _, _ = write_doc_corpus(root / "dev", n_docs=4, n_shards=1, seed=3, spm_model=spm_model)
    shards = {"doc": doc, "restore": restore, "heads": with_heads(doc, root / "train" / "heads"),
              "dev": dev, "spm": spm_model}
    quick = {"max_steps": 2, "freeze": ()}
    for start in sorted({j.init_from for j in JOBS.values() if j.init_from}):
        model, tcfg, aux = job(start, {**shards, "checkpoints": {}}, **quick)
        assert train(model, tcfg, data_dir(start, shards), dev, spm_model, root / start, aux) == 0
    return {**shards, "checkpoints": {name: root / name / "checkpoints" / "last"
                                      for name in {j.init_from for j in JOBS.values()} if name}}


def data_dir(name: str, corpus: dict) -> Path:
    """The main shards of job ``name``: heads shards for ``data: heads``, else the doc shards
    (read as sentence pairs in sentence mode)."""
    return corpus["heads"] if JOBS[name].data == "heads" else corpus["doc"]


def job(name: str, corpus: dict, **train: object) -> tuple[dict, TrainConfig, Path | None]:
    """Model dict, train config and aux shards of job ``name``."""
    setup = JOBS[name]
    init = corpus["checkpoints"].get(setup.init_from) if setup.init_from else None
    tcfg = TrainConfig(**{**TRAIN.to_dict(), "freeze": setup.freeze,
                          "init_from": str(init) if init else None,
                          "aux_ratio": setup.aux_ratio, **train})
    aux = {"restore": corpus["restore"], "doc": corpus["doc"]}.get(setup.aux)
    return {**MODEL, "name": setup.model, "extras": setup.extras}, tcfg, aux


def build(model_dict: dict, corpus: dict[str, Path]) -> torch.nn.Module:
    vocab = spm.SentencePieceProcessor(model_file=str(corpus["spm"])).get_piece_size()
    return build_model(ModelConfig.from_dict({**model_dict, "vocab_size": vocab}))


def run_ddp(name: str, corpus: dict[str, Path], out: Path) -> None:
    model, tcfg, aux = job(name, corpus)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "pipeline_lib.training.train",
           "--config-json", json.dumps({"model": model, "train": tcfg.to_dict()}),
           "--shards", str(data_dir(name, corpus)), "--dev-shards", str(corpus["dev"]),
           "--spm", str(corpus["spm"]), "--out-dir", str(out),
           *(["--aux-shards", str(aux)] if aux else [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-4000:]


def run_single(name: str, corpus: dict[str, Path], out: Path, **train_kw: object) -> None:
    model, tcfg, aux = job(name, corpus, **train_kw)
    assert train(model, tcfg, data_dir(name, corpus), corpus["dev"], corpus["spm"], out, aux) == 0


def replica_reference(name: str, corpus: dict[str, Path]) -> dict[str, torch.Tensor]:
    """What 2 DDP ranks compute, in one process (module docstring): per-rank replicas and
    streams, summed gradients over the global token count, the trainer's optimiser step."""
    model_dict, tcfg, aux = job(name, corpus)
    torch.manual_seed(tcfg.seed)
    model = build(model_dict, corpus)
    if tcfg.init_from:
        init_from_checkpoint(model, tcfg.init_from)
    apply_freeze(model, tcfg.freeze)
    replicas = [model, copy.deepcopy(model)]
    params = [[p for p in r.parameters() if p.requires_grad] for r in replicas]
    opt = build_optimizer(params[0], tcfg.lr)
    scheduler = build_scheduler(opt, tcfg.warmup)
    inputs = inputs_for(model, corpus["spm"])
    cfg = LoaderConfig(max_tokens=tcfg.max_tokens, seed=tcfg.seed, buffer_sents=tcfg.buffer_sents,
                       max_len=model.cfg.max_len, inputs=inputs.sentence_batches())
    streams = {Phase.SENTENCE: [TrainLoader(data_dir(name, corpus), cfg, rank, 2).iterate(DataPosition())
                                for rank in (0, 1)]}
    if aux:
        streams[Phase.DOCUMENT] = [TrainLoader(aux, replace(cfg, inputs=inputs), rank, 2)
                                   .iterate(DataPosition()) for rank in (0, 1)]
    for r in replicas:
        r.train()
    for step in range(STEPS):
        phase = inputs.schedule(step, tcfg.aux_ratio) if aux else Phase.SENTENCE
        tokens = torch.zeros(())
        for replica, stream in zip(replicas, streams[phase]):
            replica.zero_grad(set_to_none=True)
            batch = next(stream)[1]
            out = replica(batch)
            loss, _, n = label_smoothed_nll(out.logits, batch.tgt_out, tcfg.label_smoothing)
            if out.aux_loss is not None:
                loss = loss + out.aux_loss.float() * n
            loss.backward()
            tokens = tokens + n
        scale = 1.0 / tokens.float()
        for p, q in zip(*params):
            if p.grad is not None:   # a module the phase leaves unused gets no gradient
                p.grad = (p.grad + q.grad) * scale
        opt.step()
        scheduler.step()
        with torch.no_grad():
            for p, q in zip(*params):
                q.copy_(p)
    return model.state_dict()


def _metrics(out: Path, split: str) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if r["split"] == split]


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-6, msg=k)


# --------------------------------------------------------------------------- the loader


def _same(a: list[Batch], b: list[Batch]) -> bool:
    """The same batches in the same order (rows, every tensor, every ``extra`` entry)."""
    fields = ("src", "tgt_in", "tgt_out", "ctx_src", "src_heads", "tgt_heads")

    def equal(x: Batch, y: Batch) -> bool:
        return (x.doc_id == y.doc_id and x.sent_idx == y.sent_idx
                and x.extra.keys() == y.extra.keys()
                and all((getattr(x, f) is None and getattr(y, f) is None)
                        or torch.equal(getattr(x, f), getattr(y, f)) for f in fields)
                and all(torch.equal(v, y.extra[k]) if isinstance(v, torch.Tensor)
                        else v == y.extra[k] for k, v in x.extra.items()))

    return len(a) == len(b) and all(map(equal, a, b))


def _epoch(shards: Path, cfg: LoaderConfig, rank: int, world: int, workers: int) -> list[Batch]:
    loader = TrainLoader(shards, replace(cfg, num_workers=workers), rank, world)
    return [b for _, b in loader.iterate(DataPosition())]


def _keys(batches: list[Batch]) -> list[tuple[str, int]]:
    return [k for b in batches for k in zip(b.doc_id, b.sent_idx)]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_ranks_read_disjoint_data_whatever_their_workers(corpus, name):
    model_dict, tcfg, aux = job(name, corpus)
    model = build(model_dict, corpus)
    inputs = inputs_for(model, corpus["spm"])
    streams = [(data_dir(name, corpus), inputs.sentence_batches())] + ([(aux, inputs)] if aux else [])
    for shards, spec in streams:
        cfg = LoaderConfig(max_tokens=tcfg.max_tokens, seed=tcfg.seed, max_len=model.cfg.max_len,
                           inputs=spec)
        ranks = [_epoch(shards, cfg, rank, 2, 0) for rank in (0, 1)]
        r0, r1 = map(_keys, ranks)
        assert r0 and r1 and not set(r0) & set(r1)            # disjoint ranks cover the rows
        assert sorted(r0 + r1) == sorted(_keys(_epoch(shards, cfg, 0, 1, 0)))
        assert all(len(r) >= STEPS for r in ranks)           # no rank runs out within STEPS
        for rank in (0, 1):                                  # workers only read ahead
            assert _same(ranks[rank], _epoch(shards, cfg, rank, 2, 2))


# --------------------------------------------------------------------------- the trainer


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(JOBS))
def test_ddp_matches_two_replicas_on_the_same_global_batch(corpus, tmp_path, name):
    run_ddp(name, corpus, tmp_path / "ddp")
    ddp = tmp_path / "ddp"
    man = json.loads((ddp / "manifest.json").read_text())
    assert man["world_size"] == 2 and man["counts"]["steps"] == STEPS
    assert [r["step"] for r in _metrics(ddp, "dev")] == [2, 4]   # validated and saved mid-run
    assert ckpt.resolve_checkpoint(ddp / "checkpoints" / "step-2")
    weights = ckpt.load_state(ddp / "checkpoints" / "last")
    ts = ckpt.load_trainer_state(ddp / "checkpoints" / "last")
    _, tcfg, aux = job(name, corpus)
    aux_steps = STEPS // 2 if aux else 0
    # rank 0's stream positions: one micro-batch per update of its phase, epoch 0 throughout
    assert ts["position"] == {"epoch": 0, "batches": STEPS - aux_steps}
    assert ts["aux_position"] == {"epoch": 0, "batches": aux_steps}
    if tcfg.freeze:
        base = ckpt.load_state(tcfg.init_from)
        assert all(torch.equal(weights[k], base[k]) for k in base)   # frozen under DDP too
    if JOBS[name].data == "heads":   # DBSA's own losses ran under DDP, on both sides
        sup = man["counts"]["supervision"]
        assert sup["src_share"] > 0.5 and sup["tgt_share"] > 0.5, sup
        for record in _metrics(ddp, "train"):
            assert record["parse_loss_enc"] > 0 and record["parse_loss_dec"] > 0, record

    torch.set_num_threads(1)
    _assert_same_weights(weights, replica_reference(name, corpus))


def test_loader_workers_change_no_weight(corpus, tmp_path):
    """One process trains the same weights whether 0 or 2 workers read its batches (they only
    read ahead), while another data seed gives other weights: the comparison can tell."""
    torch.set_num_threads(1)
    run_single("transformer", corpus, tmp_path / "a", num_workers=2, update_freq=2)
    run_single("transformer", corpus, tmp_path / "b", num_workers=0, update_freq=2)
    run_single("transformer", corpus, tmp_path / "c", num_workers=0, update_freq=2, seed=2)
    a, b, c = (ckpt.load_state(tmp_path / x / "checkpoints" / "last") for x in "abc")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert max(float((a[k] - c[k]).abs().max()) for k in a) > 1e-4
