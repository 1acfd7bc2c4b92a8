"""The subword vocabulary's fixed ids and symbols: sentencepiece is trained with them
(preprocess/bpe.py), and the loader, the models and decoding rely on them."""

from __future__ import annotations

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
