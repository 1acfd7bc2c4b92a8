"""Training and decoding speed of every registered model relative to the baseline, in one run.

    .venv/bin/python bench/model_overhead.py --size tiny --device cpu [--rounds 5]
        [--steps 8] [--decode-docs 64 --decode-sentences 4] [--models doct cache] [--work DIR]
        [--smoke]

Every model of pipeline_lib/models/registry.py against the sentence-level ``transformer``: the
same size (``model_sizes`` of the config), each model's extras from ``model_settings``
(the default run's), the same synthetic corpus (documents of 25 sentences of 5-40 ids, target
lengths 0.8-1.25 x the source's, random subword heads; bench/loader_memory.py's shards), read
through the real loader
(pipeline_lib/training/data.py) in the data mode the model's ``inputs()`` declare: sentence
pairs (the baseline, DBSA with heads), contexts (DocT, CAMN), document streams (cache), and for
cross-task the trainer's schedule at ``aux_ratio`` 0.5 (the default run's): tagged sentence
batches and sub-document batches alternately. The budget is the trainer's: ``--max-tokens`` per
batch, contexts budgeted apart (``max_context_tokens``, default twice ``max_tokens``).

Training: the first ``--steps`` batches of each model are read before timing (the loader's own
speed is bench/loader_throughput.py's figure) and trained as the trainer does (forward,
label-smoothed loss plus the model's aux loss per token, backward, Adam over the trainable
parameters, inverse-sqrt schedule), with all parameters trainable and, for the models trained
on top of a sentence-level checkpoint, also with its parameters frozen (``@sentence_level``,
the two-step recipe's second step; not cross-task, see :func:`two_step`).
Rounds interleave: ``--steps`` updates of the baseline, then of the model, ``--rounds`` times
after one untimed round; a ratio is the median over rounds of the model's target tokens/s over
the baseline's in the same round.

Decoding: beam 4 at batch 64 (config.yaml ``decode``) of the first ``--decode-sentences``
sentences of ``--decode-docs`` documents, the way pipeline_lib/evaluate/decode.py walks them
for the model (document order with the cache's history, DocT/CAMN contexts, cross-task
sub-documents); untrained models, so every hypothesis runs to its maximum length (a worst case,
alike for all). Interleaved the same way; target tokens/s = hypothesis tokens per second.

On CUDA it also prints each model's peak GPU memory per 1,000 batch tokens (the budget's
tokens; its training updates on its batches, after the timing).

Prints one line per measurement, then the table of ratios (model / baseline; 1.0 = no overhead;
the goals, at most 15 % more time per target token in training and 30 % in decoding, are
ratios >= 1/1.15 = 0.87 and >= 1/1.3 = 0.77).

``--smoke`` (CI): every model and variant on CPU (1 thread) at the smallest counts: 1,000 rows,
512 tokens per batch, 1 update per round, 1 timed round, 2 documents of 2 sentences decoded;
flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


from loader_memory import VOCAB, write_shards
from train_throughput import Updater

from pipeline_lib.run_config import load_config
from pipeline_lib.batch import Batch
from pipeline_lib.batch import DataMode
from pipeline_lib.evaluate.decode import (translate_documents, translate_sentences,
                                          translate_subdocuments)
from pipeline_lib.models import MODELS, ModelConfig, build_model
from pipeline_lib.models.inputs import CTX_KEY, ModelInputs, Phase, SpecialIds
from pipeline_lib.models.search import BeamConfig
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader
from pipeline_lib.training.two_step import SENTENCE_LEVEL, apply_freeze

BASELINE = "transformer"
SPECIAL = SpecialIds(sent_break=4, src_tag=5, tgt_tag=6)   # stand-ins: no sentencepiece model
AUX_RATIO = 0.5        # cross-task's share of document batches in the default run
SEED = 1
SMOKE = {"rows": 1000, "max_tokens": 512, "steps": 1, "rounds": 1, "decode_docs": 2,
         "decode_sentences": 2, "device": "cpu", "threads": 1}


def build(name: str, size: dict, settings: dict, device: torch.device) -> torch.nn.Module:
    """A freshly initialised model of the size with the default run's extras for ``name``."""
    extras = (settings.get(name) or {}).get("extras") or {}
    cfg = ModelConfig.from_dict({**size, "vocab_size": VOCAB, "name": name, "extras": extras})
    torch.manual_seed(0)
    return build_model(cfg).to(device)


def read_batches(shards: Path, inputs: ModelInputs, n: int, max_tokens: int,
                 pad_multiple: int = 1) -> list[Batch]:
    """The first ``n`` batches the trainer's loader gives for ``inputs``."""
    it = TrainLoader(shards, LoaderConfig(max_tokens=max_tokens, seed=SEED, inputs=inputs,
                                          pad_multiple=pad_multiple)).iterate(DataPosition(0, 0))
    return [next(it)[1] for _ in range(n)]


def training_batches(model: torch.nn.Module, shards: Path, n: int, max_tokens: int,
                     device: torch.device) -> list[Batch]:
    """``n`` batches in the order the trainer feeds them: a DOCUMENT-mode model (cross-task)
    takes its main stream's sentence batches and its aux stream's sub-document batches as its
    schedule says (here the same documents feed both streams)."""
    inputs = model.inputs(SPECIAL)
    pad = 8 if device.type == "cuda" else 1     # the trainer's pad_multiple
    if inputs.mode is not DataMode.DOCUMENT:
        return [b.to(device) for b in read_batches(shards, inputs, n, max_tokens, pad)]
    streams = {Phase.SENTENCE: iter(read_batches(shards, inputs.sentence_batches(), n, max_tokens,
                                                 pad)),
               Phase.DOCUMENT: iter(read_batches(shards, inputs, n, max_tokens, pad))}
    return [next(streams[inputs.schedule(k, AUX_RATIO)]).to(device) for k in range(n)]


def decode_sources(shards: Path, docs: int, sentences: int) -> list[list[list[int]]]:
    """Source ids of the first ``sentences`` sentences of the first ``docs`` documents."""
    import pyarrow.parquet as pq

    out: dict[str, list[list[int]]] = {}
    for row in pq.read_table(sorted(shards.glob("shard-*.parquet"))[0],
                             columns=["doc_id", "src_ids"]).to_pylist():
        if row["doc_id"] not in out and len(out) == docs:
            break
        doc = out.setdefault(row["doc_id"], [])
        if len(doc) < sentences:
            doc.append(row["src_ids"])
    return list(out.values())


def decoder(model: torch.nn.Module, docs: list[list[list[int]]], device: torch.device
            ) -> Callable[[], int]:
    """A pass of beam search over ``docs`` as pipeline_lib.evaluate.decode walks them for this
    model (its ``translate_rows``, minus detokenising); returns hypothesis tokens."""
    inputs = model.inputs(SPECIAL)
    cfg = BeamConfig(beam=4, batch_size=64)
    srcs = [[inputs.tag_sentence(s) for s in d] for d in docs]
    if inputs.in_document_order:
        return lambda: _tokens(translate_documents(model, srcs, cfg, device))
    if inputs.mode is DataMode.DOCUMENT:
        return lambda: _tokens(translate_subdocuments(model, srcs, inputs, cfg, device))
    contexts = None
    if inputs.mode is DataMode.CONTEXT:
        rows = [[{"doc_id": str(k), "sent_idx": i, "src_ids": s} for i, s in enumerate(d)]
                for k, d in enumerate(srcs)]
        inputs.add_context(rows, SEED)
        contexts = [r[CTX_KEY] for d in rows for r in d]
    flat = [s for d in srcs for s in d]
    return lambda: _tokens([translate_sentences(model, flat, cfg, device, contexts, inputs)])


def _tokens(hyps: list[list[list]]) -> int:
    return sum(len(h[0].tokens) for doc in hyps for h in doc)


def timed_decode(run: Callable[[], int], clock=time.perf_counter) -> float:
    t = clock()
    return run() / (clock() - t)


def interleave(base: Callable[[], float], other: Callable[[], float], rounds: int
               ) -> tuple[float, float, float]:
    """Median rates of ``base`` and ``other`` over ``rounds`` alternating runs (one untimed
    round first) and the median of the per-round ratios other / base: a ratio compares two runs
    seconds apart, so load that drifts over minutes (a shared machine) cancels in it."""
    base(), other()
    b, o = [], []
    for _ in range(rounds):
        b.append(base())
        o.append(other())
    ratio = statistics.median(y / x for x, y in zip(b, o))
    return statistics.median(b), statistics.median(o), ratio


def batch_tokens(batches: list[Batch]) -> float:
    """Mean tokens per batch as the budget counts them (each row's longer side + 1)."""
    return statistics.mean(int(torch.maximum(b.src.ne(0).sum(1), b.tgt_in.ne(0).sum(1)).sum())
                           for b in batches)


def peak_memory(upd: Updater, batches: list[Batch], device: torch.device) -> float:
    """Peak GPU memory of ``upd``'s updates on ``batches``, MiB per 1,000 batch tokens (CUDA)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    for b in batches:
        upd.update(b)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**20 / (batch_tokens(batches) / 1000)


def two_step(model: torch.nn.Module) -> bool:
    """Whether to measure with the sentence-level parameters frozen (``@sentence_level``, the
    two-step recipe's second step) besides all trainable. Not a DOCUMENT-mode model
    (cross-task): half its batches are plain sentence batches, in which a frozen sentence level
    leaves nothing to train (the paper trains everything)."""
    return (hasattr(model, "sentence_level_prefixes")
            and model.inputs(SPECIAL).mode is not DataMode.DOCUMENT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="tiny", help="model_sizes entry (tiny, base, big)")
    ap.add_argument("--config", nargs="*", default=[],
                    help="config files, merged in order (default config/config.yaml)")
    ap.add_argument("--models", nargs="+", default=[m for m in MODELS if m != BASELINE])
    ap.add_argument("--rows", type=int, default=20_000, help="sentence pairs of the corpus")
    ap.add_argument("--max-tokens", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=8, help="updates (batches) per model and round")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds")
    ap.add_argument("--decode-docs", type=int, default=64)
    ap.add_argument("--decode-sentences", type=int, default=4, help="per document")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/docmt-bench-overhead"))
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: this process's CPU time (a CPU shared with other jobs)")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): smoke defaults, see the module docstring")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(**SMOKE)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if a.device == "auto" else a.device))
    clock = time.process_time if a.clock == "cpu" and device.type == "cpu" else time.perf_counter
    config = load_config(*a.config)
    size, settings = config["model_sizes"][a.size], config["model_settings"]
    shards = a.work / f"rows{a.rows}-paired-heads"
    write_shards(shards, a.rows, heads=True, paired=True)
    print(f"size={a.size} device={device} threads={torch.get_num_threads()} "
          f"max_tokens={a.max_tokens} steps={a.steps} rounds={a.rounds}", flush=True)

    base_model = build(BASELINE, size, settings, device).train()
    base = Updater(base_model, device, False)
    base_batches = training_batches(base_model, shards, a.steps, a.max_tokens, device)
    if device.type == "cuda":
        print(f"{BASELINE:10s} peak GPU memory: "
              f"{peak_memory(base, base_batches, device):,.1f} MiB per 1,000 batch tokens")
    docs = decode_sources(shards, a.decode_docs, a.decode_sentences)
    # an untrained baseline of its own: the one above learns to end sentences early
    base_decode = decoder(build(BASELINE, size, settings, device).eval(), docs, device)
    table: dict[str, dict[str, float]] = {}
    for name in a.models:
        row = table.setdefault(name, {})
        for variant in ("all", "frozen"):
            model = build(name, size, settings, device).train()
            if variant == "frozen":
                if not two_step(model):
                    continue
                apply_freeze(model, (SENTENCE_LEVEL,))
            batches = training_batches(model, shards, a.steps, a.max_tokens, device)
            upd = Updater(model, device, False)
            b, o, ratio = interleave(lambda: base.rate(base_batches, a.steps, clock),
                                     lambda: upd.rate(batches, a.steps, clock), a.rounds)
            row[f"train {variant}"] = ratio
            print(f"{name:10s} train {variant:6s}: {o:8,.0f} vs baseline {b:8,.0f} target "
                  f"tokens/s, ratio {ratio:.2f}", flush=True)
            if device.type == "cuda":
                row[f"MiB/1k {variant}"] = peak_memory(upd, batches, device)
                print(f"{name:10s} train {variant:6s}: peak GPU memory "
                      f"{row[f'MiB/1k {variant}']:,.1f} MiB per 1,000 batch tokens", flush=True)
        if a.no_decode:
            continue
        run = decoder(build(name, size, settings, device).eval(), docs, device)
        b, o, ratio = interleave(lambda: timed_decode(base_decode, clock),
                                 lambda: timed_decode(run, clock), a.rounds)
        row["decode"] = ratio
        print(f"{name:10s} decode beam4 bs64: {o:8,.0f} vs baseline {b:8,.0f} target tokens/s, "
              f"ratio {ratio:.2f}", flush=True)
    cols = ["train frozen", "train all", "decode"] + (
        ["MiB/1k frozen", "MiB/1k all"] if device.type == "cuda" else [])
    print(f"\nratios model / {BASELINE} ({a.size}, {device}): " + " | ".join(cols))
    for name, row in table.items():
        print(f"{name:10s} " + " | ".join(f"{row[c]:.2f}" if c in row else "-" for c in cols))


if __name__ == "__main__":
    main()
