"""Fixed names shared by every stage, so that a string is spelled in exactly one place."""

from __future__ import annotations

from enum import Enum

# --- special subword ids (sentencepiece is trained with these ids, see bpe.py) ---
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
NO_HEAD = -1   # a subword dependency head that gives no supervision (dbsa, subword_heads)

# --- user-defined symbols every model may need (Chen et al. 2021; Jiang et al. 2019) ---
MASK_GAP = "<mask1>"        # CA-GSR gap sentence placeholder
MASK_TOKEN = "<mask2>"      # CA-MSR masked token
SENT_BREAK = "####"         # CAMN context sentence break (Jiang et al. 2019, Eq. 18)
DOC_SEP = "<doc>"           # document separator


def lang_tag(lang: str) -> str:
    """Target-language tag prepended to sentences in cross-task pre-training (Chen et al. 2021)."""
    return f"<2{lang}>"


# An evaluated system "<model>_sent": a document model decoded sentence by sentence (decode.smk);
# it has no training job of its own (plan.systems maps it to <model>, for the report too).
SENT_SUFFIX = "_sent"


class DataMode(str, Enum):
    """What a model reads besides the sentence pair, so the trainer and decoder pick the loader:
    SENTENCE (transformer, dbsa), CONTEXT (previous source sentences: doct, camn), STREAM
    (document streams across batches: cache), DOCUMENT (whole sub-documents: crosstask)."""

    SENTENCE = "sentence"
    CONTEXT = "context"
    STREAM = "stream"
    DOCUMENT = "document"


# Names that become Snakemake wildcards and file names (corpus keys, model/job names, download
# entries, discourse suites): no spaces, slashes or shell metacharacters. The config schema uses
# the same expression (tests/unit/test_config_schema.py checks that they agree).
# Match it whole (re.fullmatch): "$" alone also matches before a trailing newline. At most
# NAME_MAX_LEN characters, so that every file name built from one stays within NAME_MAX (255).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_MAX_LEN = 100


class Split(str, Enum):
    TRAIN = "train"
    DEV = "dev"
    TEST = "test"
    MONO = "mono"


# --- file names written by stages ---
DOCS_FILE = "docs.parquet"
QUARANTINE_FILE = "quarantine.parquet"
MANIFEST_FILE = "manifest.json"

# --- training runs and checkpoint directories (train.py, checkpoint.py) ---
CKPT_MODEL_FILE = "model.pt"                # state_dict
CKPT_CONFIG_FILE = "config.yaml"            # model config, train config, git revision
CKPT_SPM_FILE = "spm.model"                 # copy of the sentencepiece model
CKPT_TRAINER_STATE_FILE = "trainer_state.pt"  # optimizer, scheduler, RNG, data position, step
METRICS_FILE = "metrics.jsonl"              # one JSON record per line: step, split, loss, ...
ATTEMPTS_FILE = "attempts.json"             # every start of a run: attempt, SLURM job, seconds
CKPT_BEST = "best"      # lowest dev loss; initialises the next job of a two-step recipe
CKPT_FINAL = "final"    # what decoding and scoring read: the averaged checkpoint, else best

# --- Batch.extra keys shared by the data loader, the decoder and the models ---
EXTRA_DOC_START = "doc_start"   # (B,) bool: row starts a new document (document-stream batches)
EXTRA_DOC_SLOT = "doc_slot"     # (B,) long: document slot of each row (decode.translate_documents)
EXTRA_LANE = "lane"             # (B,) long: document stream (lane) of each row (training streams)
EXTRA_LANES = "lanes"           # int: lanes of the stream a training batch belongs to

# --- scoring and report (score.py, discourse.py, report.py) ---
ALL_TEST_SETS = "All"       # the concatenation of every test set in the results table
SIG_MARK = "†"              # significantly different from the baseline (paired bootstrap)


class IngestReason(str, Enum):
    """Why a corpus reader quarantined a record (quarantine ``reason`` column, manifest keys)."""

    UNDECODABLE = "undecodable_bytes"
    CONTROL_CHARACTER = "control_character"            # C0 but tab (NUL, ESC, CR...), DEL, C1
    EMPTY = "empty_segment"
    TOO_LONG = "too_long"
    SEG_COUNT_MISMATCH = "segment_count_mismatch"      # the two sides of a document differ in length
    SEG_ID_MISMATCH = "segment_id_mismatch"            # same length, but different <seg id>s
    DUPLICATE_SEG_ID = "duplicate_segment_id"
    DUPLICATE_DOC_ID = "duplicate_doc_id"
    MISSING_DOC_ID = "missing_doc_id"
    MISSING_REFERENCE = "missing_reference"            # no target document for this source document
    REFERENCE_WITHOUT_SOURCE = "reference_without_source"
    DOC_NOT_CONTIGUOUS = "doc_id_not_contiguous"       # doc-id file revisits an earlier document
    DOC_TYPE_EXCLUDED = "doc_type_excluded"            # Gigaword non-story documents
    NO_SEGMENTS = "document_without_segments"          # e.g. Gigaword <TEXT> without <P>
    FIELD_COUNT = "field_count"                        # a ` ||| ` line (ASPEC) with the wrong fields
    INVALID_REFERENCE = "invalid_character_reference"  # &#xD800; (a surrogate), &#x110000;
    UNRESOLVED_ENTITY = "unresolved_entity"            # wmt_xml: an external or skipped entity


class HygieneReason(str, Enum):
    """Why the hygiene pass of ingestion (pipeline_lib/ingest/hygiene.py) removed a pair from a
    split it filters (quarantine ``reason`` column with stage ``hygiene``, manifest keys)."""

    DUPLICATE_PAIR = "duplicate_pair"                  # the same pair earlier in the split
    DUPLICATE_PAIR_NORMALISED = "duplicate_pair_normalised"  # the same letters and digits
    DUPLICATE_DOCUMENT = "duplicate_document"          # every pair of an earlier document, in order
    COPY = "source_copy"                               # a reference equals the source (normalised)
    LENGTH_RATIO = "length_ratio"                      # longer side > max_length_ratio x shorter
    WRONG_LANGUAGE_SRC = "wrong_language_src"          # src_lang improbable (language id)
    WRONG_LANGUAGE_TGT = "wrong_language_tgt"          # tgt_lang improbable in a reference
    OVERLAP_DEV = "overlap_dev"                        # the pair or document is in dev
    OVERLAP_TEST = "overlap_test"                      # the pair or document is in test


class IngestRepair(str, Enum):
    """What a reader fixed instead of rejecting (manifest ``repaired``), so a fix is counted too."""

    STRAY_BOM = "stray_bom_removed"    # U+FEFF after the start of a file (files concatenated)
    INVISIBLE = "invisible_character_removed"  # zero-width space, word joiner, bidi controls


# --- dependency parsing (stanza_models.py, parse.py) ---
STANZA_MODEL_FILE = "model.json"    # model descriptor: stanza.Pipeline kwargs + where models came from


class ParseReason(str, Enum):
    """Why the parse stage quarantined a sentence (quarantine ``reason`` column, manifest keys)."""

    EMPTY = "empty_sentence"           # no token after tokenisation
    TOO_LONG = "too_long"              # more words than parse.max_words (parsing is quadratic)
    PARSE_FAILED = "parse_failed"      # stanza raised on this sentence alone
    INVALID_TREE = "invalid_tree"      # not exactly one root, or a head out of range
