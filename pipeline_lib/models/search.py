"""Search over any registered model: batched beam search and greedy search, with incremental
decoder caching.

Settings of the seed papers: beam 4, GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^alpha with
alpha = 0.6 (Wu et al. 2016, Eq. 14), |Y| counting the final EOS; max output length
``max_len_a * src_len + max_len_b`` tokens before EOS. A sentence stops when ``beam`` hypotheses
have ended (fairseq's criterion) or at its max length, and is then dropped from the batch so the
rest runs on fewer rows.

WHY in models/: the trainer's dev BLEU and every evaluation command search the same way, and
the trainer may not import the evaluation stage (imports point down).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Sequence

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class BeamConfig:
    """Search settings (config.yaml ``decode`` section)."""

    beam: int = 4
    lenpen: float = 0.6
    max_len_a: float = 1.2
    max_len_b: int = 10
    batch_size: int = 64      # sentences (sentence mode) or documents (document mode) per batch
    nbest: int = 1
    greedy: bool = False
    static: bool | None = None    # fixed-shape beam steps, a CUDA graph on CUDA; None: on CUDA

    def __post_init__(self) -> None:
        if self.beam < 1 or not 1 <= self.nbest <= self.beam:
            raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={self.beam} nbest={self.nbest}")

    @staticmethod
    def flag_problems(args: argparse.Namespace) -> list[str]:
        """What is wrong with the search flags of a decoding CLI, each naming its flag, before
        a model is loaded (issue 36: --batch-size -1 ended in an IndexError stack, --lenpen
        nan decoded with a NaN score order and exited 0)."""
        checks = [("--beam", args.beam, args.beam >= 1, "at least 1"),
                  ("--nbest", args.nbest, 1 <= args.nbest <= args.beam, "between 1 and --beam"),
                  ("--batch-size", args.batch_size, args.batch_size >= 1, "at least 1"),
                  ("--lenpen", args.lenpen, math.isfinite(args.lenpen) and args.lenpen >= 0,
                   "a finite number >= 0"),
                  ("--max-len-a", args.max_len_a,
                   math.isfinite(args.max_len_a) and args.max_len_a >= 0, "a finite number >= 0"),
                  ("--max-len-b", args.max_len_b, args.max_len_b >= 0, "at least 0")]
        return [f"{flag} {value}: must be {what}" for flag, value, ok, what in checks if not ok]

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The beam flags every decoding CLI shares (decode, translate), defaults from here."""
        d = cls()
        parser.add_argument("--beam", type=int, default=d.beam)
        parser.add_argument("--lenpen", type=float, default=d.lenpen)
        parser.add_argument("--max-len-a", type=float, default=d.max_len_a)
        parser.add_argument("--max-len-b", type=int, default=d.max_len_b)
        parser.add_argument("--batch-size", type=int, default=d.batch_size)
        parser.add_argument("--nbest", type=int, default=d.nbest)


@dataclass
class Hypothesis:
    tokens: list[int]     # generated ids, without BOS/EOS
    score: float          # log P(Y|X) / lp(|Y|)
    logprob: float        # log P(Y|X), EOS included


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty, Wu et al. (2016) Eq. 14: ((5 + |Y|) / 6)^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def source_batch(srcs: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> Batch:
    """Right-padded (B, S) source ids, each ending with EOS; empty target tensors."""
    S = max(len(s) for s in srcs) + 1
    src = torch.full((len(srcs), S), PAD_ID, dtype=torch.long)
    for i, s in enumerate(srcs):
        src[i, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        src[i, len(s)] = EOS_ID
    empty = torch.zeros(len(srcs), 0, dtype=torch.long)
    return Batch(src=src, tgt_in=empty, tgt_out=empty).to(device)


def max_output_lengths(src_len: torch.Tensor, cfg: BeamConfig, max_len: int) -> torch.Tensor:
    """(B,) longest output (tokens before EOS) for sources of ``src_len`` (B,) pieces counting
    their EOS: ``max_len_a * src_len + max_len_b``, within a model's ``max_len`` positions.
    Public so that other engines are given the very same limits (pipeline_lib/export)."""
    return (cfg.max_len_a * src_len.float() + cfg.max_len_b).long().clamp(1, max_len - 1)


def _max_lengths(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> torch.Tensor:
    """(B,) longest output per sentence of ``batch`` (:func:`max_output_lengths`)."""
    return max_output_lengths(batch.src.ne(PAD_ID).sum(1), cfg, model.cfg.max_len)


def _mask_specials(lp: torch.Tensor, force_eos: torch.Tensor) -> torch.Tensor:
    """No PAD/BOS ever; only EOS on rows that reached their max length. lp: (R, V), force_eos: (R,)."""
    lp[:, PAD_ID] = -math.inf
    lp[:, BOS_ID] = -math.inf
    if force_eos.any():
        eos_only = torch.full_like(lp, -math.inf)
        eos_only[:, EOS_ID] = lp[:, EOS_ID]
        lp = torch.where(force_eos[:, None], eos_only, lp)
    return lp


@torch.inference_mode()
def greedy_search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    """Arg-max decoding with the same caching, max length and scoring as :func:`beam_search`."""
    B = batch.src.size(0)
    max_len = _max_lengths(model, batch, cfg)
    state = model.init_state(model.encode(batch))
    tokens = torch.full((B, 1), BOS_ID, dtype=torch.long, device=batch.src.device)
    hist = torch.zeros(B, 0, dtype=torch.long, device=batch.src.device)
    total = torch.zeros(B, device=batch.src.device)
    active = torch.arange(B, device=batch.src.device)
    out: list[list[Hypothesis]] = [[] for _ in range(B)]
    for step in range(int(max_len.max()) + 1):
        lp, state = model.decode_step(tokens, state, step)
        lp = _mask_specials(lp, step >= max_len[active])
        best, tok = lp.max(dim=1)                                          # (n,)
        total = total + best
        hist = torch.cat([hist, tok[:, None]], dim=1)
        done = tok.eq(EOS_ID)
        for i in done.nonzero().flatten().tolist():
            out[int(active[i])] = [Hypothesis(hist[i, :-1].tolist(),
                                              float(total[i]) / length_penalty(step + 1, cfg.lenpen),
                                              float(total[i]))]
        if done.all():
            break
        keep = (~done).nonzero().flatten()
        if keep.numel() < done.numel():
            state = state.reorder(keep)
            active, hist, total = active[keep], hist[keep], total[keep]
        tokens = hist[:, -1:]
    return out


class GraphedStep:
    """The decoder step of one fixed-shape beam search (:class:`StaticSteps`), captured once
    as a CUDA graph and replayed: a step then costs the GPU's time, not the host's (beam 4 at
    batch 1 spent ~6.5 ms of Python and kernel launches per step on an H100). Every tensor the
    step reads (the tokens, the position, the key/value buffers, the memories) keeps its
    address, so the replay reads the values of the step at hand."""

    def __init__(self, model: torch.nn.Module, state, tokens: torch.Tensor) -> None:
        self.model, self.state = model, state
        self.tokens = tokens.clone()
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens)
        if self.graph is not None:
            self.graph.replay()
            return self.out.clone()
        # First call: run eagerly on a side stream (this step's result, and the allocator and
        # libraries warmed up), then capture the same step for every later one.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self.model.decode_step(self.tokens, self.state, -1)[0].clone()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.model.decode_step(self.tokens, self.state, -1)[0]
        return out


def _static(cfg: BeamConfig, device: torch.device) -> bool:
    return device.type == "cuda" if cfg.static is None else cfg.static


@torch.inference_mode()
def beam_search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    """Batched beam search; returns per sentence the ``cfg.nbest`` best hypotheses, best first.

    Each step takes the top 2K of the (n, K*V) candidates: EOS candidates among the first K end a
    hypothesis; the first K non-EOS candidates continue, so every live beam stays full.
    Finished sentences leave the batch, so the rest run on fewer rows; in fixed-shape decoding
    (``cfg.static``, the CUDA default) they stay, unread, and every step has the same shapes:
    steps 2.. replay one CUDA graph (:class:`GraphedStep`). Both give the same hypotheses
    (tests/unit/evaluate/test_decode.py).
    """
    K, dev = cfg.beam, batch.src.device
    B = batch.src.size(0)
    max_len = _max_lengths(model, batch, cfg)
    static = _static(cfg, dev)
    # One encoder row per sentence, K decoder rows (hypotheses) per sentence.
    state = model.init_state(model.encode(batch)).with_beam(K)
    tokens = torch.full((B * K, 1), BOS_ID, dtype=torch.long, device=dev)
    if static:
        state = state.with_static(int(max_len.max()) + 1)
        live = [True] * B                   # sentences still searched (all rows stay)
        step_fn = None
    hist = torch.zeros(B * K, 0, dtype=torch.long, device=dev)          # (n*K, step)
    scores = torch.full((B, K), -math.inf, device=dev)
    scores[:, 0] = 0.0                      # all beams start identical: expand only the first
    active = torch.arange(B, device=dev)    # sentence index of each live row group
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    order = torch.arange(2 * K, device=dev)
    for step in range(int(max_len.max()) + 1):
        n = active.numel()
        if not static:
            lp, state = model.decode_step(tokens, state, step)             # (n*K, V)
        else:
            state.steps.advance(step)
            if dev.type == "cuda" and step > 0:
                step_fn = step_fn or GraphedStep(model, state, tokens)
                lp = step_fn(tokens)
            else:
                lp = model.decode_step(tokens, state, step)[0]
        at_max = step >= max_len[active]                                   # (n,)
        lp = _mask_specials(lp, at_max.repeat_interleave(K))
        V = lp.size(1)
        cand = lp.view(n, K, V).add_(scores[:, :, None]).view(n, K * V)   # in place: lp is ours
        top_s, top_i = cand.topk(min(2 * K, K * V), dim=1)                  # (n, 2K)
        beam_i, tok = top_i // V, top_i % V
        is_eos = tok.eq(EOS_ID)
        ended = is_eos[:, :K] & top_s[:, :K].isfinite()
        lp_norm = length_penalty(step + 1, cfg.lenpen)
        for i, j in ended.nonzero().tolist():
            sent = int(active[i])
            if len(finished[sent]) < K and (not static or live[sent]):
                row = i * K + int(beam_i[i, j])
                finished[sent].append(Hypothesis(hist[row].tolist(), float(top_s[i, j]) / lp_norm,
                                                 float(top_s[i, j])))
        # first K non-EOS candidates continue (EOS ones sort after all non-EOS ones)
        cont = (is_eos.long() * 2 * K + order[: top_s.size(1)]).topk(K, dim=1, largest=False).indices
        scores = top_s.gather(1, cont)
        next_tok = tok.gather(1, cont)
        rows = (torch.arange(n, device=dev)[:, None] * K + beam_i.gather(1, cont))   # (n, K)
        done = at_max | torch.tensor([len(finished[int(s)]) >= K for s in active.tolist()], device=dev)
        if static:
            live = [a and not d for a, d in zip(live, done.tolist())]
            if not any(live):
                break
        else:
            if done.all():
                break
            keep = (~done).nonzero().flatten()
            rows, scores, next_tok, active = rows[keep], scores[keep], next_tok[keep], active[keep]
        rows = rows.reshape(-1)
        state = state.reorder(rows)
        hist = torch.cat([hist[rows], next_tok.reshape(-1, 1)], dim=1)
        tokens = next_tok.reshape(-1, 1)
    return [sorted(f, key=lambda h: -h.score)[: cfg.nbest] for f in finished]


def search(model: torch.nn.Module, batch: Batch, cfg: BeamConfig) -> list[list[Hypothesis]]:
    return greedy_search(model, batch, cfg) if cfg.greedy else beam_search(model, batch, cfg)
