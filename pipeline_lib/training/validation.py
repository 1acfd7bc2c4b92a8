"""Validation during training: dev loss (the stop rule's and best checkpoint's default criterion),
how much of it the source explains, and greedy dev BLEU with its length ratio (the learning curve
a reader looks at)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from pipeline_lib.batch import Batch
from pipeline_lib.vocab import EOS_ID, PAD_ID
from pipeline_lib.models.inputs import ModelInputs
from pipeline_lib.training.optim import label_smoothed_nll


def autocast(device: torch.device):
    """bf16 autocast on CUDA (no loss scaling needed); fp32 on CPU, where bf16 is slow."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


@torch.no_grad()
def dev_loss(model: torch.nn.Module, batches: list[Batch], epsilon: float,
             device: torch.device, other_source: bool = False) -> dict[str, float]:
    """Per-token label-smoothed loss and NLL (and perplexity) on the dev batches.

    With ``other_source`` (sentence-level models), also the NLL of each target given the source
    of the next row of its batch (``nll_other_source``) and how much lower the NLL is with its
    own source (``source_gain``, nats per token). WHY: a decoder that has learnt the target
    side's language reaches a low NLL from the target prefix alone, and BLEU then falls where the
    NLL does not; the gain tells that apart. Batches of one row have no other source and are
    left out of both terms of the gain."""
    was_training = model.training
    model.eval()
    tot_loss = tot_nll = ntok = 0.0
    own = other = other_tok = 0.0
    for b in batches:
        b = b.to(device)
        with autocast(device):
            out = model(b)
        loss, nll, n = label_smoothed_nll(out.logits, b.tgt_out, epsilon)
        tot_loss += float(loss)
        tot_nll += float(nll)
        ntok += float(n)
        if other_source and b.src.size(0) > 1:
            with autocast(device):
                shifted = model(replace(b, src=b.src.roll(1, 0), src_heads=None if b.src_heads is None
                                        else b.src_heads.roll(1, 0)))
            other += float(label_smoothed_nll(shifted.logits, b.tgt_out, epsilon)[1])
            own += float(nll)
            other_tok += float(n)
    model.train(was_training)
    nll_tok = tot_nll / max(ntok, 1.0)
    m = {"loss": tot_loss / max(ntok, 1.0), "nll": nll_tok, "ppl": math.exp(min(nll_tok, 50.0))}
    if other_source and other_tok:
        m["nll_other_source"] = other / other_tok
        m["source_gain"] = (other - own) / other_tok
    return m


def dev_bleu(model: torch.nn.Module, batches: list[Batch], spm_path: str | Path,
             device: torch.device, inputs: ModelInputs = ModelInputs()) -> dict[str, float]:
    """Corpus BLEU (sacrebleu) of greedy translations of the dev batches, and the length ratio
    of hypotheses to references (sacreBLEU's ``sys_len / ref_len``): ``{"bleu", "len_ratio"}``.

    Greedy rather than beam search keeps validation cheap; references are the detokenised
    reference ids (sentencepiece round-trips text, so this equals the shard's ``tgt_text`` up to
    unknown characters). The model's tag (``inputs.tag``) is stripped from hypotheses and
    references. WHY the ratio: two models with the same dev NLL can differ in BLEU through
    their output length alone (too short: brevity penalty; run-on repetitions: precision),
    which BLEU by itself does not tell apart."""
    import sacrebleu
    import sentencepiece as spm

    from pipeline_lib.models.search import BeamConfig, greedy_search

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    search_cfg = BeamConfig(beam=1, greedy=True)
    hyps, refs = [], []
    was_training = model.training
    model.eval()
    for b in batches:
        b = b.to(device)
        with autocast(device):
            found = greedy_search(model, b, search_cfg)
        for nbest, ref in zip(found, b.tgt_out.tolist()):
            hyps.append(sp.decode(inputs.strip_tag(nbest[0].tokens if nbest else [])))
            refs.append(sp.decode(inputs.strip_tag([t for t in ref if t not in (PAD_ID, EOS_ID)])))
    model.train(was_training)
    score = sacrebleu.corpus_bleu(hyps, [refs])
    return {"bleu": float(score.score), "len_ratio": score.sys_len / max(score.ref_len, 1)}
