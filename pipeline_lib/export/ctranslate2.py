"""Sentence-level checkpoints as CTranslate2 models (https://github.com/OpenNMT/CTranslate2).

CTranslate2 (CT2) is a C++ inference engine for Transformer encoder-decoders: the fast path for a
sentence-level model on CPU. :func:`export` rebuilds the checkpoint's model (``load_model``) and
fills a ``ctranslate2.specs.TransformerSpec`` from its modules through a
``ctranslate2.converters.Converter`` (the way CT2's own OpenNMT-py and fairseq converters do),
then copies the checkpoint's ``spm.model`` beside it and writes ``manifest.json`` (source
checkpoint, its sha256, CT2 version), so the directory is self-contained::

    <output>/model.bin  config.json  shared_vocabulary.json  spm.model  manifest.json

How our Transformer (pipeline_lib/models/transformer.py, layers.py) maps onto the spec:

* residual blocks: post-norm ``LN(x + f(x))`` unless ``norm_first`` -> ``pre_norm``; pre-norm
  stacks end with ``enc_norm`` / ``dec_norm`` -> the spec's final ``layer_norm``. Each block's
  LayerNorm is the spec's ``layer_norm`` of that sub-layer (``self_attention``, ``attention``,
  ``ffn``); epsilon 1e-5 (torch's default, CT2's config ``layer_norm_epsilon``).
* self-attention: our fused ``qkv`` (d -> 3d, rows [W_q; W_k; W_v], heads contiguous inside each)
  is CT2's fused ``linear[0]``; cross-attention ``q`` -> ``linear[0]`` and fused ``kv`` (rows
  [W_k; W_v]) -> ``linear[1]``; ``out`` -> ``linear[-1]``. CT2 scales queries by 1/sqrt(d_head)
  like ``F.scaled_dot_product_attention``.
* FFN ``w1``/``w2`` -> ``linear_0``/``linear_1``, ReLU.
* embeddings: CT2 multiplies by sqrt(d_model) (``scale_embeddings``), then adds
  ``position_encodings.encodings[t]`` for position t = 0, 1, ...: exactly ``embed_tokens``. The
  table is ours (``sinusoidal_positions``: sin on even, cos on odd dimensions); CT2's built-in
  table puts all sines before all cosines, so it must not be left to CT2.
* the output projection is the target embedding when tied (``share_embeddings``), else
  ``out_proj``; no bias. CT2 stores a tied matrix once (it aliases equal variables).
* vocabulary: the sentencepiece pieces by id; ``<s>`` (BOS_ID) starts the decoder, ``</s>``
  (EOS_ID) ends the source (``add_source_eos``) and the output, as source_batch and the search do.

Only the plain ``transformer`` is exported. ``dbsa`` is refused: its parse head stays in the
network at inference (the last head of one encoder and one decoder layer attends with unscaled
bi-affine scores), which CT2's multi-head attention cannot express. Every context-aware model is
refused: the spec has no input for document context.

:func:`search_options` gives the ``translate_batch`` arguments closest to our search
(pipeline_lib/models/search.py) and says where CT2 differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline_lib.atomic import atomic_output
from pipeline_lib.checkpoint import MODEL_FILE as CKPT_MODEL_FILE, SPM_FILE as CKPT_SPM_FILE
from pipeline_lib.layout import CKPT_FINAL, MANIFEST_FILE
from pipeline_lib.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipeline_lib.manifest import Manifest, sha256_file
from pipeline_lib.models.config import ModelConfig
from pipeline_lib.models.layers import Attention, FeedForward, Layer
from pipeline_lib.models.registry import MODELS, build_model
from pipeline_lib.models.search import BeamConfig, max_output_lengths
from pipeline_lib.models.transformer import Transformer
from pipeline_lib.checkpoint import DamagedCheckpoint, find_checkpoint, load_model, read_config

LAYER_NORM_EPS = 1e-5                                     # torch.nn.LayerNorm's default


class ExportError(ValueError):
    """A checkpoint that cannot be exported; the message says why."""


def check_exportable(cfg: ModelConfig) -> None:
    """Refuse every model whose decoding a TransformerSpec cannot reproduce: the model says
    whether and how it departs from the sentence-level Transformer (module docstring)."""
    if cfg.name not in MODELS:
        raise ExportError(f"{cfg.name}: not exportable to CTranslate2: not a registered model")
    departure = build_model(cfg).translation_departure()
    if departure is not None:
        raise ExportError(f"{cfg.name}: not exportable to CTranslate2: {departure}; only the "
                          "sentence-level 'transformer' is exported (translate this one with "
                          "pipeline_lib.translate)")


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).cpu().numpy()


def _set_linear(spec: Any, linear: torch.nn.Linear) -> None:
    spec.weight = _array(linear.weight)                   # (out, in), CT2's layout too
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_layer_norm(spec: Any, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _set_ffn(spec: Any, block: Any) -> None:
    ffn: FeedForward = block.fn
    _set_layer_norm(spec.layer_norm, block.norm)
    _set_linear(spec.linear_0, ffn.w1)
    _set_linear(spec.linear_1, ffn.w2)


def _set_attention(spec: Any, block: Any) -> None:
    attn: Attention = block.fn
    _set_layer_norm(spec.layer_norm, block.norm)
    if hasattr(attn, "qkv"):       # self-attention: [W_q; W_k; W_v] is CT2's fused linear[0]
        _set_linear(spec.linear[0], attn.qkv)
    else:                          # cross-attention: q, then [W_k; W_v] fused as linear[1]
        _set_linear(spec.linear[0], attn.q)
        _set_linear(spec.linear[1], attn.kv)
    _set_linear(spec.linear[-1], attn.out)


def _check_blocks(layer: Layer, expected: tuple[str, ...]) -> None:
    if tuple(layer.blocks) != expected:
        raise ExportError(f"a layer with blocks {list(layer.blocks)}; TransformerSpec has {list(expected)}")


def transformer_spec(model: Transformer, pieces: list[str]) -> Any:
    """The filled ``TransformerSpec`` of ``model``, vocabulary ``pieces`` (id order)."""
    from ctranslate2.specs import TransformerSpec, common_spec

    cfg = model.cfg
    if len(pieces) != cfg.vocab_size:
        raise ExportError(f"the model has {cfg.vocab_size} embeddings but spm.model {len(pieces)} pieces")
    spec = TransformerSpec.from_config((cfg.enc_layers, cfg.dec_layers), cfg.n_heads,
                                       pre_norm=cfg.norm_first,
                                       activation=common_spec.Activation.RELU)
    positions = _array(model.positions)                   # (max_len, d), our sin/cos layout
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = _array(model.embed.weight)
    encoder.position_encodings.encodings = positions
    encoder.scale_embeddings = True                       # x sqrt(d_model), as embed_tokens
    for layer_spec, layer in zip(encoder.layer, model.encoder):
        _check_blocks(layer, ("self_attn", "ffn"))
        _set_attention(layer_spec.self_attention, layer.blocks["self_attn"])
        _set_ffn(layer_spec.ffn, layer.blocks["ffn"])
    decoder.embeddings.weight = _array(model.tgt_embed.weight)
    decoder.position_encodings.encodings = positions
    decoder.scale_embeddings = True
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _check_blocks(layer, ("self_attn", "cross_attn", "ffn"))
        _set_attention(layer_spec.self_attention, layer.blocks["self_attn"])
        _set_attention(layer_spec.attention, layer.blocks["cross_attn"])
        _set_ffn(layer_spec.ffn, layer.blocks["ffn"])
    if cfg.norm_first:
        _set_layer_norm(encoder.layer_norm, model.enc_norm)
        _set_layer_norm(decoder.layer_norm, model.dec_norm)
    # Output projection: tied to the target embedding (Transformer.project), no bias.
    out = model.tgt_embed.weight if model.out_proj is None else model.out_proj.weight
    decoder.projection.weight = _array(out)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token = pieces[UNK_ID]
    spec.config.bos_token = pieces[BOS_ID]
    spec.config.eos_token = pieces[EOS_ID]
    spec.config.decoder_start_token = pieces[BOS_ID]     # tgt_in starts with BOS
    spec.config.add_source_bos = False
    spec.config.add_source_eos = True                     # source_batch: ids + [EOS]
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def spm_pieces(spm_model: Path) -> list[str]:
    """The sentencepiece pieces by id: the CT2 vocabulary."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def convert(model: Transformer, pieces: list[str], output: Path, quantization: str | None = None,
            files: Sequence[Path] = ()) -> None:
    """Write ``model`` with vocabulary ``pieces`` as a CT2 model directory ``output`` (replaced if
    it exists), ``files`` copied beside it: the conversion alone, without a manifest (benchmarks
    convert freshly initialised models that have no checkpoint).

    :param quantization: CT2 weight type (``int8``, ``int8_float32``, ``float16``, ...; None
        keeps float32)."""
    from ctranslate2.converters import Converter

    class CheckpointConverter(Converter):
        """CT2's converter protocol: ``_load`` returns the filled spec; ``convert`` validates,
        quantizes and saves it."""

        def _load(self) -> Any:
            spec = transformer_spec(model, pieces)
            for f in files:
                spec.register_file(str(f), f.name)
            return spec

    CheckpointConverter().convert(str(output), quantization=quantization, force=True)


def export(source: Path, output: Path, which: str = CKPT_FINAL,
           quantization: str | None = None) -> Path:
    """Convert the checkpoint ``source`` (a checkpoint or job folder, :func:`find_checkpoint`)
    into a self-contained CT2 model directory ``output`` (with ``spm.model`` and
    ``manifest.json``), written atomically; returns ``output``."""
    import ctranslate2

    try:
        checkpoint = find_checkpoint(source, which)
    except ValueError as e:
        raise ExportError(str(e)) from None
    check_exportable(ModelConfig.from_dict(read_config(checkpoint)["model"]))
    spm_model = checkpoint / CKPT_SPM_FILE
    if not spm_model.exists():
        raise ExportError(f"{checkpoint}: no {CKPT_SPM_FILE}; the CT2 model needs its vocabulary")
    try:   # its weights and tokenizer copy as written (checkpoint.verify)
        model, cfg = load_model(checkpoint)
    except DamagedCheckpoint as e:
        raise ExportError(str(e)) from None
    pieces = spm_pieces(spm_model)
    manifest = Manifest(stage="export_ctranslate2",
                        params={"checkpoint": which, "quantization": quantization or "float32"})
    with atomic_output(Path(output)) as tmp:
        convert(model, pieces, tmp, quantization, files=[spm_model])
        manifest.add_input(checkpoint)
        manifest.extra.update({
            "source_checkpoint": str(checkpoint.resolve()),
            "source_sha256": sha256_file(checkpoint / CKPT_MODEL_FILE),
            "model": cfg.to_dict(),
            "ctranslate2_version": ctranslate2.__version__,
        })
        manifest.counts = {"parameters": sum(p.numel() for p in model.parameters()),
                           "vocabulary": len(pieces)}
        manifest.write(tmp / MANIFEST_FILE)
    return Path(output)


# --- translating with the exported model as our search would -----------------------------------

def search_options(cfg: BeamConfig, src_lengths: Sequence[int], max_len: int,
                   pieces: Sequence[str]) -> dict[str, Any]:
    """``Translator.translate_batch`` keyword arguments for one batch, closest to our
    ``search(model, batch, cfg)`` on sources of ``src_lengths`` pieces (without EOS).

    Equal: beam size (1 = greedy), n-best, 2 x beam candidates per step with finished beams
    replaced by the next live candidates, stopping after ``beam`` finished hypotheses (CT2's
    ``patience`` 1), EOS allowed from the first step (``min_decoding_length`` 0), PAD and BOS
    never produced (suppressed), no input truncation. Different, so beam outputs may differ:

    * length normalisation: ours is GNMT's ((5 + |Y|) / 6)^alpha with |Y| counting EOS; CT2
      divides by |Y|^alpha with |Y| without EOS (``length_penalty`` = alpha, the closest setting);
    * max length: ours is per sentence, ``max_len_a * (src + EOS) + max_len_b`` tokens before a
      forced EOS; CT2 takes one ``max_decoding_length`` per call, so the batch's largest limit
      is used and a hypothesis that reaches it ends without EOS. Greedy outputs are the same
      tokens up to that limit.
    """
    limits = max_output_lengths(torch.tensor([n + 1 for n in src_lengths]), cfg, max_len)
    return dict(beam_size=1 if cfg.greedy else cfg.beam, num_hypotheses=cfg.nbest,
                patience=1.0, length_penalty=0.0 if cfg.greedy else cfg.lenpen,
                max_decoding_length=int(limits.max()), min_decoding_length=0,
                max_input_length=0, max_batch_size=0,
                suppress_sequences=[[pieces[PAD_ID]], [pieces[BOS_ID]]])


def translate_ids(translator: Any, srcs: Sequence[Sequence[int]], cfg: BeamConfig, max_len: int,
                  pieces: Sequence[str]) -> list[list[int]]:
    """1-best output ids (without EOS) of one batch of source ids (without EOS), in order."""
    index = {p: i for i, p in enumerate(pieces)}
    results = translator.translate_batch([[pieces[i] for i in s] for s in srcs],
                                         **search_options(cfg, [len(s) for s in srcs], max_len, pieces))
    return [[index[p] for p in r.hypotheses[0]] for r in results]
