"""Decoding speed: sentences/s of beam 4 at batch sizes 1 and 64 (``--batch-size``), beside greedy search; with
``--reference ctranslate2``, target tokens/s of beam 4 against the same model in CTranslate2.

Uses a trained checkpoint and dev shards when given; otherwise a freshly initialised model of a
``model_sizes`` size on synthetic sources (Bible-verse-like lengths). An untrained model rarely
emits EOS, so the synthetic figure is a worst case: every hypothesis runs to its max length.

    .venv/bin/python bench/decode_throughput.py [--checkpoint DIR --shards DIR] [--size tiny]
        [--sentences 256] [--device cpu|cuda] [--threads 2] [--reference ctranslate2 --rounds 3]
        [--static auto|on|off|both] [--smoke]

``--smoke`` (CI): the same runs at the smallest counts, on CPU: 4 sentences, a 1,000-piece
vocabulary for the untrained model, one round; flags given explicitly still win.

The last line printed is the headline figure: beam-4 sentences/s at batch size 64 (or
``--batch-size``), or with
``--reference ctranslate2`` the ratio of target tokens/s ours / CTranslate2.

The CTranslate2 comparison exports the same weights (the checkpoint through
pipeline_lib.export; the untrained model converted with placeholder pieces) and decodes the
same sentences in the same batches (sorted by length, as translate_sentences batches them) with
the closest search settings (pipeline_lib.export.ctranslate2.search_options: same beam, length
penalty alpha, candidates and stopping; CT2 normalises by |Y|^alpha where we use GNMT's
((5+|Y|)/6)^alpha, and takes one max length per batch, the batch's largest of ours). After a
warm-up pass of each, ours and CT2 alternate for ``--rounds`` passes; the medians are compared.
Greedy agreement is measured with sentences grouped by their max length, where CT2's limit is
exactly ours.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch


from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipeline_lib.evaluate.decode import read_shards, translate_sentences
from pipeline_lib.models.search import BeamConfig, max_output_lengths
from pipeline_lib.models import ModelConfig, build_model

SMOKE = {"sentences": 4, "vocab": 1000, "device": "cpu", "threads": 1, "rounds": 1}


def load(args: argparse.Namespace) -> tuple[torch.nn.Module, list[list[int]]]:
    if args.checkpoint:
        from pipeline_lib.checkpoint import load_model

        model, cfg = load_model(args.checkpoint, device=args.device)
    else:
        if args.model_json:   # a machine without snakemake (bench/gpu_check.py on a lent GPU)
            size = json.loads(args.model_json)
        else:
            from pipeline_lib.run_config import load_config

            size = load_config(*args.config)["model_sizes"][args.size]
        cfg = ModelConfig.from_dict({**size, "vocab_size": args.vocab, "dropout": 0.0})
        torch.manual_seed(0)
        model = build_model(cfg).to(args.device)
    if args.shards:
        srcs = [list(r["src_ids"])[: cfg.max_len - 1] for r in read_shards(Path(args.shards))]
    else:
        rng = random.Random(0)
        srcs = [[rng.randrange(4, cfg.vocab_size) for _ in range(rng.randint(10, 60))]
                for _ in range(args.sentences)]
    return model.eval(), srcs[: args.sentences]


def timed(model: torch.nn.Module, srcs: list[list[int]], cfg: BeamConfig, device: str) -> tuple[float, float]:
    """(sentences/s, output tokens/s) of one pass over ``srcs``."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    hyps = translate_sentences(model, srcs, cfg, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    s = time.perf_counter() - t0
    return len(srcs) / s, sum(len(h[0].tokens) for h in hyps) / s


def length_batches(srcs: list[list[int]], size: int) -> list[list[list[int]]]:
    """The batches translate_sentences decodes: sentences sorted by length, ``size`` at a time."""
    order = sorted(range(len(srcs)), key=lambda i: len(srcs[i]))
    return [[srcs[i] for i in order[k:k + size]] for k in range(0, len(order), size)]


def ctranslate2_model(model: torch.nn.Module, args: argparse.Namespace, tmp: Path) -> tuple[Path, list[str]]:
    """The same weights as a CTranslate2 directory and its pieces: the checkpoint exported by
    pipeline_lib.export, or the untrained model converted with placeholder pieces."""
    from pipeline_lib.export.ctranslate2 import convert, export, spm_pieces

    out = tmp / "ct2"
    if args.checkpoint:
        export(Path(args.checkpoint), out)
        return out, spm_pieces(out / "spm.model")
    specials = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
    pieces = [specials.get(i, f"w{i}") for i in range(model.cfg.vocab_size)]
    convert(model, pieces, out)
    return out, pieces


def compare_ctranslate2(model: torch.nn.Module, srcs: list[list[int]], args: argparse.Namespace) -> None:
    """Beam 4 at batch 64, ours and CTranslate2 alternating; greedy agreement (module docstring)."""
    import ctranslate2

    from pipeline_lib.export.ctranslate2 import translate_ids

    with tempfile.TemporaryDirectory() as tmp:
        path, pieces = ctranslate2_model(model, args, Path(tmp))
        translator = ctranslate2.Translator(str(path), device=args.device, compute_type="default",
                                            inter_threads=1, intra_threads=args.threads)
        max_len = model.cfg.max_len
        print(f"reference=ctranslate2 {ctranslate2.__version__} intra_threads={args.threads} "
              f"compute_type=default (float32 weights)")

        # Greedy agreement: groups of equal max length, so CT2's one limit per call is ours.
        greedy = BeamConfig(greedy=True, batch_size=64)
        limits = max_output_lengths(torch.tensor([len(s) + 1 for s in srcs]), greedy, max_len).tolist()
        groups: dict[int, list[list[int]]] = {}
        for s, lim in zip(srcs, limits):
            groups.setdefault(lim, []).append(s)
        same = 0
        for group in groups.values():
            ours = translate_sentences(model, group, greedy, args.device)
            for k in range(0, len(group), greedy.batch_size):
                theirs = translate_ids(translator, group[k:k + greedy.batch_size], greedy, max_len, pieces)
                same += sum(o[0].tokens == t for o, t in zip(ours[k:k + greedy.batch_size], theirs))
        print(f"greedy agreement with ctranslate2: {same}/{len(srcs)} identical "
              f"({100.0 * same / len(srcs):.1f}%)")

        beam = BeamConfig(beam=4, batch_size=64)
        batches = length_batches(srcs, beam.batch_size)

        def ours_pass() -> tuple[float, list[list[int]]]:
            t0 = time.perf_counter()
            hyps = [h[0].tokens for b in batches for h in translate_sentences(model, b, beam, args.device)]
            return time.perf_counter() - t0, hyps

        def ct2_pass() -> tuple[float, list[list[int]]]:
            t0 = time.perf_counter()
            hyps = [h for b in batches for h in translate_ids(translator, b, beam, max_len, pieces)]
            return time.perf_counter() - t0, hyps

        ours_pass(), ct2_pass()                                     # warm-up
        rates: dict[str, list[float]] = {"ours": [], "ctranslate2": []}
        outputs: dict[str, list[list[int]]] = {}
        for r in range(args.rounds):
            passes = [("ours", ours_pass), ("ctranslate2", ct2_pass)]
            for name, run in passes if r % 2 == 0 else passes[::-1]:   # alternate who goes first
                seconds, outputs[name] = run()
                rates[name].append(sum(map(len, outputs[name])) / seconds)
            print(f"round {r + 1}: ours {rates['ours'][-1]:9.1f} tokens/s  "
                  f"ctranslate2 {rates['ctranslate2'][-1]:9.1f} tokens/s")
        identical = sum(a == b for a, b in zip(outputs["ours"], outputs["ctranslate2"]))
        print(f"beam4 bs64 outputs identical: {identical}/{len(srcs)} (length normalisation "
              f"and per-batch max length differ, see pipeline_lib.export.ctranslate2.search_options)")
        ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["ctranslate2"])
        print(f"beam4 bs64 target tokens/s (median of {args.rounds}): ours {ours:.1f}  "
              f"ctranslate2 {theirs:.1f}")
        print(f"ours_over_ctranslate2={ours / theirs:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="trained checkpoint directory (default: an untrained model of --size)")
    ap.add_argument("--shards", help="dev shard directory with index.parquet (default: synthetic)")
    ap.add_argument("--config", nargs="*", default=[],
                    help="config files, merged in order (default config/config.yaml)")
    ap.add_argument("--size", default="tiny", help="model_sizes entry (tiny, base, big)")
    ap.add_argument("--model-json", help="the untrained model's ModelConfig fields as JSON, "
                    "instead of --size (no config is read: snakemake need not be installed)")
    ap.add_argument("--vocab", type=int, default=8000, help="vocabulary of the untrained model")
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64,
                    help="the large batch of the beam and greedy rows (batch 1 is always run)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (torch, and CTranslate2's intra_threads); 1 avoids OpenMP "
                         "spin contention on a shared 2-core machine")
    ap.add_argument("--reference", choices=["ctranslate2"],
                    help="compare beam 4 at batch 64 with the same model in this engine")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes of each (--reference)")
    ap.add_argument("--static", choices=["auto", "on", "off", "both"], default="auto",
                    help="beam search in fixed shapes, a CUDA graph per search on CUDA (auto: on "
                         "CUDA); both: beam rows with it off and on")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest real run (CI): smoke defaults, see the module docstring")
    if ap.parse_known_args()[0].smoke:
        ap.set_defaults(**SMOKE)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, srcs = load(args)
    print(f"device={args.device} threads={args.threads} sentences={len(srcs)} "
          f"params={model.num_parameters()} source={'shards' if args.shards else 'synthetic'}")
    if args.reference:
        compare_ctranslate2(model, srcs, args)
        return
    timed(model, srcs[:8], BeamConfig(beam=4, batch_size=8), args.device)       # warm-up
    results = {}
    statics = {"auto": [None], "on": [True], "off": [False], "both": [False, True]}[args.static]
    bs = args.batch_size
    runs = [(f"greedy bs{bs}", BeamConfig(greedy=True, batch_size=bs), len(srcs))]
    for st in statics:
        tag = "" if st is None else (" static" if st else " dynamic")
        runs += [(f"beam4 bs1{tag}", BeamConfig(beam=4, batch_size=1, static=st), min(len(srcs), 32)),
                 (f"beam4 bs{bs}{tag}", BeamConfig(beam=4, batch_size=bs, static=st), len(srcs))]
    for name, cfg, n in runs:
        sent_s, tok_s = timed(model, srcs[:n], cfg, args.device)
        results[name] = sent_s
        print(f"{name:20s} {n:5d} sentences  {sent_s:9.2f} sentences/s  {tok_s:10.1f} tokens/s")
    print(f"beam4_bs{bs}_sentences_per_s="
          f"{results[[k for k in results if f'bs{bs}' in k][-1]]:.2f}")


if __name__ == "__main__":
    main()
