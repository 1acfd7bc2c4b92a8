"""``translate``: any trained model on a text of one's own, documents in, documents out.

``python -m pipeline_lib.translate results/train_model/doct < my.txt > my.en`` (also the
``translate`` console script). The model is a training job's folder (its ``checkpoints/final``,
what the pipeline's own evaluation reads; ``--weights best|averaged|last`` picks another) or a
checkpoint folder; its own ``spm.model`` encodes and decodes.

Input (a file, or stdin with ``-``): plain text, one sentence per line, in documents separated by
blank lines (the default), by lines holding only ``--doc-separator`` (e.g. ``<d>``, the Maruf et
al. 2019 releases), or given by ``--docids FILE`` (one document id per line). ``--reader NAME
--spec JSON`` reads any configured corpus format instead (``pipeline_lib.ingest``: the source side
of ``--split``). Output: one line per input line, the same separators in the same places (for a
reader, documents separated by blank lines); with ``--nbest K`` > 1, K lines ``i ||| hypothesis
||| score`` per sentence (i = its 0-based number in the input), as Moses writes n-best lists.

The model's inputs are built exactly as in training and test-set decoding
(pipeline_lib.evaluate.decode.translate_rows): context models read their previous source
sentences, document-level models their sub-document (``--unit sentence`` for sentences alone),
models with translation history are decoded document by document, in order. So for the same
input, the hypotheses equal what rule ``decode_test`` writes.

The input is checked as ingestion checks a corpus line (``pipeline_lib.ingest.lines.decode``):
a line that is not UTF-8 or holds a control character (NUL, ESC, DEL, a C1 control) is an error
naming ``stdin:LINE`` or ``FILE:LINE`` (exit status 2), where ingestion would have quarantined
it: the model never saw such text and answers it with a made-up sentence. A sentence longer than
the model's positions is refused the same way, naming its line: decoding would keep only its
start, and a translation of half a line must not read as the translation of the line. With
``--reader``, the records the reader quarantines are counted on stderr (not translated).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Callable, TextIO

import torch

from pipeline_lib.atomic import atomic_output, exits_on_full_disk
from pipeline_lib.checkpoint import SPM_FILE as CKPT_SPM_FILE
from pipeline_lib.checkpoint import find_checkpoint
from pipeline_lib.layout import CKPT_CHOICES, CKPT_FINAL
from pipeline_lib.models.search import BeamConfig


#: the document separator line of the Maruf et al. (2019) releases
MARUF_SEPARATOR = "<d>"


class TranslateError(ValueError):
    """Input or model that cannot be translated; the message says what and where."""


@dataclass
class Layout:
    """The input's lines: sentences (with their document and position) and separator lines,
    so that the output keeps every line where it was."""

    lines: list[str | None]            # a separator line's own text, None for a sentence
    rows: list[dict]                   # doc_id, sent_idx, text: one per sentence line


def read_text(stream: BinaryIO, name: str) -> list[str]:
    """The lines of a UTF-8 byte stream (no line ends), each checked by ingestion's own line
    check (``lines.decode``: a leading byte-order mark dropped, undecodable bytes and control
    characters found); a line it faults is an error naming it (decoded line by line, so the
    message gives the line, not just a byte offset)."""
    from pipeline_lib.ingest.lines import CONTROL, decode
    from pipeline_lib.ingest.reasons import IngestReason

    lines = stream.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for n, raw in enumerate(lines, 1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TranslateError(f"{name}:{n}: not UTF-8 ({e.reason} at byte {e.start}); "
                                 "convert the file first, e.g. iconv -t UTF-8") from None
        line = decode(raw.rstrip(b"\r"), n, name)
        if line.fault is IngestReason.CONTROL_CHARACTER:
            found = CONTROL.search(line.text)
            raise TranslateError(f"{name}:{n}: control character U+{ord(found.group()):04X} at "
                                 f"column {found.start() + 1} (ingestion quarantines such lines: "
                                 f"{line.fault.value}); remove it first, e.g. "
                                 "tr -d '\\000-\\010\\013-\\037\\177'")
        out.append(line.text)
    return out


def layout_from_lines(lines: list[str], separator: str = "",
                      docids: list[str] | None = None, name: str = "stdin") -> Layout:
    """Sentences grouped into documents by separator lines, or by ``docids`` (one per line);
    each row says where it is (``name:line``) for messages."""
    if docids is not None:
        if len(docids) != len(lines):
            raise TranslateError(f"--docids has {len(docids)} lines but the input has "
                                 f"{len(lines)}: they must be line-aligned")
        rows, seen, kept = [], {}, []
        for no, (doc, text) in enumerate(zip(docids, lines), 1):
            if not text.strip(" \t"):     # passed through blank, not made a sentence of
                kept.append(text)
                continue
            kept.append(None)
            rows.append({"doc_id": doc, "sent_idx": seen.get(doc, 0), "text": text,
                         "where": f"{name}:{no}"})
            seen[doc] = seen.get(doc, 0) + 1
        return Layout(kept, rows)
    if separator != MARUF_SEPARATOR and (no := next(
            (n for n, t in enumerate(lines, 1) if t.strip() == MARUF_SEPARATOR), None)):
        raise TranslateError(f"{name}:{no}: a line '{MARUF_SEPARATOR}' separates documents in "
                             f"the Maruf et al. (2019) releases; pass --doc-separator "
                             f"'{MARUF_SEPARATOR}' (translated as a sentence, it would merge "
                             "the documents), as ingest refuses it")
    from pipeline_lib.ingest.plaintext import blank_separated

    blanks = [n for n, t in enumerate(lines, 1) if not t.strip(" \t")]
    seen = any(t.strip() == separator for t in lines)
    if blank_separated(separator, seen, len(blanks), len(lines) - len(blanks)):
        raise TranslateError(f"{name}:{blanks[0]}: --doc-separator is {separator!r}, which "
                             f"occurs on no line, but the input has {len(blanks)} blank lines: "
                             "its documents are separated by blank lines; pass "
                             "--doc-separator '' (a blank line)")
    layout, doc, idx = Layout([], []), 0, 0
    for no, text in enumerate(lines, 1):
        if text.strip() == separator:
            layout.lines.append(text)
            if idx:
                doc, idx = doc + 1, 0
            continue
        if not text.strip(" \t"):     # a blank line under another separator: passed through
            layout.lines.append(text)  # blank; translated, a model makes a sentence up
            continue
        layout.lines.append(None)
        layout.rows.append({"doc_id": f"d{doc}", "sent_idx": idx, "text": text,
                            "where": f"{name}:{no}"})
        idx += 1
    return layout


def warn_long_documents(layout: Layout, name: str) -> None:
    """Ingest's rule for documents too long to be documents (``ingest.long_documents``), said on
    stderr: the translation goes on, as ingest's does."""
    from collections import Counter

    from pipeline_lib.ingest import long_documents

    if found := long_documents.finding(Counter(r["doc_id"] for r in layout.rows)):
        print(f"translate: warning: {name}: {found['finding']}; {long_documents.ADVICE}",
              file=sys.stderr)


def layout_from_reader(reader: str, spec: dict, split: str) -> Layout:
    """The source side of ``split`` of a corpus read by a configured reader; documents are
    separated by blank lines in the output. What the reader quarantines is counted on stderr:
    those records are not translated, and the output would otherwise not say so.

    ``spec`` is the corpus entry of the config (``{"splits": {split: {"src": ...}}, ...}``) or,
    as README writes it, just the split's files (``{"src": ..., "tgt": ...}``), taken as
    ``split``'s entry."""
    from collections import Counter

    from pipeline_lib.ingest import Limits, reader_module
    from pipeline_lib.tables import Rejected, Sentence

    if "splits" not in spec and "src" in spec:
        spec = {"splits": {split: spec}}
    rows, rejected = [], Counter()
    for s in reader_module(reader).read("input", {**spec, "reader": reader}, Limits()):
        if isinstance(s, Sentence) and s.split == split:
            rows.append({"doc_id": s.doc_id, "sent_idx": s.sent_idx, "text": s.src,
                         "where": f"{s.origin_file}:{s.origin_line}"})
        elif isinstance(s, Rejected):
            rejected[s.reason] += 1
    if rejected:
        print(f"translate: reader {reader} quarantined {sum(rejected.values())} records of the "
              f"splits it read, not translated: {dict(rejected)}", file=sys.stderr)
    if not rows:
        raise TranslateError(f"reader {reader}: no sentence in split {split!r}")
    lines: list[str | None] = []
    for k, r in enumerate(rows):
        if k and r["doc_id"] != rows[k - 1]["doc_id"]:
            lines.append("")
        lines.append(None)
    return Layout(lines, rows)


def check_target(spm_path: Path, inputs, target_lang: str | None) -> None:
    """A requested output language must be the one the model's tag says (multi-task models)."""
    if target_lang is None:
        return
    import sentencepiece as spm

    from pipeline_lib.vocab import lang_tag

    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    piece = lang_tag(target_lang)
    if sp.piece_to_id(piece) == sp.unk_id():
        raise TranslateError(f"--target-lang {target_lang}: the model knows no tag {piece} "
                             f"(its vocabulary {spm_path})")
    if inputs.tag is not None and sp.id_to_piece(inputs.tag) != piece:
        raise TranslateError(f"--target-lang {target_lang}: the model translates into "
                             f"{sp.id_to_piece(inputs.tag)}, not {piece}")


def pretokenized(checkpoint: Path) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """The source side's pre-tokenization and the target side's detokenization of a model
    trained on pre-tokenized text (config ``tokenize``: its steps and truecasers are in the
    checkpoint), as decode_test applies them; identities for a model of raw text."""
    from pipeline_lib.checkpoint import read_config, truecaser_file

    record = (read_config(checkpoint).get("train") or {}).get("pretokenize")
    if not record:
        return (lambda line: line), (lambda line: line)
    from pipeline_lib.tokenization import Pretokenizer, detokenizer

    (src, tgt), steps = record["langs"], record["tokenize"]
    src_steps = tuple(steps.get(src) or ())
    truecaser = checkpoint / truecaser_file(src) if "truecase" in src_steps else None
    return Pretokenizer(src, src_steps, truecaser), detokenizer(tgt, steps.get(tgt) or [])


def check_lengths(rows: list[dict], room: int) -> None:
    """Refuse a sentence longer than ``room``, the pieces of a source the model reads (its
    positions less the end of sentence and a language tag: what ``translate_rows`` keeps, cutting
    the rest), naming its line; one sentence per line is what the model was trained on."""
    for r in rows:
        if len(r["src_ids"]) > room:
            raise TranslateError(f"{r['where']}: {len(r['src_ids'])} pieces, more than the {room} "
                                 "the model reads (its max_len); decoding would translate only "
                                 "the start: split the line into sentences, one per line")


def visible(texts: list[str]) -> list[str]:
    """``texts`` without the invisible characters ingest removes (zero-width, bidi controls:
    ``lines.INVISIBLE``), counted once on stderr, so a text translated by hand reads as the
    pipeline's test sets do (issue 36 item 4)."""
    from pipeline_lib.ingest.lines import INVISIBLE

    out = [t.translate(INVISIBLE) for t in texts]
    removed = sum(map(len, texts)) - sum(map(len, out))
    if removed:
        lines = sum(len(a) != len(b) for a, b in zip(texts, out))
        print(f"translate: removed {removed} invisible characters (zero-width, bidi controls) "
              f"from {lines} lines, as ingest does", file=sys.stderr)
    return out


def write_output(out: TextIO, layout: Layout, translations, nbest: int) -> None:
    it = iter(translations)
    k = 0
    for line in layout.lines:
        if line is not None:
            out.write(line + "\n")
            continue
        t = next(it)
        if nbest > 1:
            out.writelines(f"{k} ||| {h} ||| {s:.4f}\n" for h, s in zip(t.hyps, t.scores))
        else:
            out.write(t.hyps[0] + "\n")
        k += 1


@exits_on_full_disk
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model", type=Path, help="results/train_model/<job> or a checkpoint folder")
    ap.add_argument("--input", "-i", default="-", help="text file, '-' = stdin")
    ap.add_argument("--output", "-o", default="-", help="text file, '-' = stdout")
    ap.add_argument("--weights", default=CKPT_FINAL, choices=CKPT_CHOICES,
                    help="checkpoint of a job folder (default: what the pipeline evaluates)")
    ap.add_argument("--doc-separator", default="", help="line that separates documents ('' = blank)")
    ap.add_argument("--docids", type=Path, help="one document id per input line")
    ap.add_argument("--reader", help="read --input with this corpus reader (pipeline_lib.ingest)")
    ap.add_argument("--spec", default="{}", help="the corpus entry as JSON ({\"splits\": {...}}), or only --split's "
                    "files ({\"src\": ..., \"tgt\": ...})")
    ap.add_argument("--split", default="test", help="split of --reader's corpus to translate")
    ap.add_argument("--unit", choices=["document", "sentence"], default="document",
                    help="document-level models: with the sub-document, or each sentence alone")
    ap.add_argument("--target-lang", help="refuse a model that does not translate into it")
    BeamConfig.add_arguments(ap)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    a = ap.parse_args(argv)
    problems = BeamConfig.flag_problems(a) + ([f"--threads {a.threads}: must be at least 0"]
                                              if a.threads < 0 else [])
    if problems:
        ap.error("; ".join(problems))
    try:
        return translate(a)
    except (TranslateError, FileNotFoundError, PermissionError, ValueError) as e:
        print(f"translate: {e}", file=sys.stderr)
        return 2


def check_paths(a: argparse.Namespace) -> None:
    """translate never destroys its input, nor translates what it cannot write: an ``--output``
    that is the ``--input`` or ``--docids`` file itself (the same inode, by any path) is refused
    before anything is read (issue 36: ``-i mine.es -o mine.es`` replaced the text with its
    translation), as is one that is a folder, or in a folder it may not write into."""
    if a.output == "-":
        return
    out = Path(a.output)
    if out.is_dir():
        raise TranslateError(f"--output {out}: is a folder, not a file to write")
    folder = next(d for d in (out.parent.absolute(), *out.parent.absolute().parents) if d.exists())
    if not os.access(folder, os.W_OK | os.X_OK):   # said now, not after the translation
        raise TranslateError(f"--output {out}: permission denied: cannot write into {folder}")
    for flag, given in (("--input", a.input), ("--docids", a.docids)):
        if given is None or str(given) == "-" or not out.exists() or not Path(given).exists():
            continue
        if os.path.samefile(given, out):
            raise TranslateError(f"--output {out} is the {flag} file itself: its text would be "
                                 "replaced by the translation; write to another file")


def translate(a: argparse.Namespace) -> int:
    import sentencepiece as spm

    from pipeline_lib.evaluate.decode import translate_rows
    from pipeline_lib.models.inputs import inputs_for
    from pipeline_lib.checkpoint import load_model, training_seed

    check_paths(a)
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = BeamConfig(beam=a.beam, lenpen=a.lenpen, max_len_a=a.max_len_a, max_len_b=a.max_len_b,
                     batch_size=a.batch_size, nbest=a.nbest)
    try:
        checkpoint = find_checkpoint(a.model, a.weights)
    except ValueError as e:
        raise TranslateError(str(e)) from None
    spm_path = checkpoint / CKPT_SPM_FILE
    if a.reader:
        layout = layout_from_reader(a.reader, json.loads(a.spec), a.split)
    else:
        name = "stdin" if a.input == "-" else a.input
        if a.input == "-":
            lines = read_text(sys.stdin.buffer, name)
        else:
            with open(a.input, "rb") as f:
                lines = read_text(f, name)
        docids = None
        if a.docids is not None:
            with open(a.docids, "rb") as f:
                docids = read_text(f, str(a.docids))
        layout = layout_from_lines(lines, a.doc_separator, docids, name)
    warn_long_documents(layout, "input" if a.reader else name)
    model, _ = load_model(checkpoint, device=a.device)
    inputs = inputs_for(model, spm_path)
    check_target(spm_path, inputs, a.target_lang)
    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    tokenize, detokenize = pretokenized(checkpoint)
    texts = [tokenize(t) for t in visible([r["text"] for r in layout.rows])]
    rows = [{**r, "src_ids": sp.encode(t)} for r, t in zip(layout.rows, texts)]
    check_lengths(rows, model.cfg.max_len - 1 - (inputs.tag is not None))
    seed = training_seed(checkpoint)
    translations, _ = translate_rows(model, rows, cfg, spm_path, a.device,
                                     inputs.in_document_order, a.unit, seed,
                                     progress=sys.stderr.isatty())
    # translate_rows answers in document order; the layout lists rows in input order
    by_key = {(t.doc_id, t.sent_idx): t for t in translations}
    ordered = [replace(t, hyps=[detokenize(h) for h in t.hyps])
               for t in (by_key[(r["doc_id"], r["sent_idx"])] for r in layout.rows)]
    if a.output == "-":
        write_output(sys.stdout, layout, ordered, a.nbest)
    else:   # complete or not at all: a failed write leaves no half output, nor a lost old one
        with atomic_output(a.output) as tmp, open(tmp, "w", encoding="utf-8") as f:
            write_output(f, layout, ordered, a.nbest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
