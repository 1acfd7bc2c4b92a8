"""Fixed names shared by every stage, so that a string is spelled in exactly one place."""

from __future__ import annotations

from enum import Enum

# --- special subword ids (sentencepiece is trained with these ids, see bpe.py) ---
PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

# --- user-defined symbols every model may need (Chen et al. 2021; Jiang et al. 2019) ---
MASK_GAP = "<mask1>"        # CA-GSR gap sentence placeholder
MASK_TOKEN = "<mask2>"      # CA-MSR masked token
SENT_BREAK = "####"         # CAMN context sentence break (Jiang et al. 2019, Eq. 18)
DOC_SEP = "<doc>"           # document separator


def lang_tag(lang: str) -> str:
    """Target-language tag prepended to sentences in cross-task pre-training (Chen et al. 2021)."""
    return f"<2{lang}>"


class Split(str, Enum):
    TRAIN = "train"
    DEV = "dev"
    TEST = "test"
    MONO = "mono"


# --- file names written by stages ---
DOCS_FILE = "docs.parquet"
QUARANTINE_FILE = "quarantine.parquet"
MANIFEST_FILE = "manifest.json"
