"""Where things are: the checkout's own folders, resolved inside the process that needs them.

WHY a function and not a rule parameter: a path of the checkout in a rule's ``params`` is a
rerun trigger, so a moved checkout (or a cluster mounting it elsewhere) would rerun the rule;
the rule passes the configured value and the job resolves it here.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = ROOT / "third_party"   # the UD treebank files the repository ships (licence inside)


def shared_dir(configured: str | Path | None = None) -> Path:
    """Material machines cannot download (UD treebanks under ``ud/``): env ``DOCMT_SHARED``,
    else the configured ``shared_dir``, else the repository's ``third_party/``."""
    return Path(os.environ.get("DOCMT_SHARED") or configured or THIRD_PARTY)


# --- file names of stage outputs (results/<rule>/...) ---
DOCS_FILE = "docs.parquet"
QUARANTINE_FILE = "quarantine.parquet"
MANIFEST_FILE = "manifest.json"
METRICS_FILE = "metrics.jsonl"              # one JSON record per line: step, split, loss, ...
ATTEMPTS_FILE = "attempts.json"             # every start of a run: attempt, SLURM job, seconds
# Checkpoints: <job>/checkpoints/<name>, each a folder with model.pt and config.yaml
CHECKPOINT_DIR = "checkpoints"
CKPT_BEST = "best"      # lowest dev loss; initialises the next job of a two-step recipe
CKPT_FINAL = "final"    # what decoding and scoring read: the averaged checkpoint, else best
CKPT_LAST = "last"      # the latest save: what a resumed run continues from
CKPT_AVERAGED = "averaged"    # the average of the last train.average_last_k step checkpoints
CKPT_BEST_KEPT = "best-kept"  # best under a name Snakemake does not delete before a retry
#: the checkpoints a user may pick by name (translate --weights, export --checkpoint)
CKPT_CHOICES = (CKPT_FINAL, CKPT_AVERAGED, CKPT_BEST, CKPT_LAST)
PARSE_FILE = "parse.parquet"        # one parse shard's rows (parse_shard)
SPM_PREFIX = "spm"                  # train_bpe writes <prefix>.model and <prefix>.vocab
ENCODED_FILE = "encoded.parquet"    # a corpus's sentences as piece ids (encode_bpe, encode_heads)
RESTORE_FILE = "restore.parquet"    # noised documents for restoration (noise_docs)
STANZA_MODEL_FILE = "model.json"    # model descriptor: stanza.Pipeline kwargs + where models came from

# Names that become Snakemake wildcards and file names (corpus keys, model/job names, download
# entries, discourse suites): no spaces, slashes or shell metacharacters. The config schema uses
# the same expression (tests/unit/test_config_schema.py checks that they agree).
# Match it whole (re.fullmatch): "$" alone also matches before a trailing newline. At most
# NAME_MAX_LEN characters, so that every file name built from one stays within NAME_MAX (255).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
NAME_MAX_LEN = 100

# An evaluated system "<model>_sent": a document model decoded sentence by sentence (decode.smk);
# it has no training job of its own (plan.systems maps it to <model>, for the report too).
SENT_SUFFIX = "_sent"
