"""Export a trained checkpoint for an inference engine outside PyTorch.

``python -m pipeline_lib.export ctranslate2 SOURCE --output DIR [--checkpoint
final|averaged|best|last] [--quantization int8|int8_float32|int16|float16|bfloat16|float32]``

SOURCE is a training job's folder (``results/train_model/<job>``; ``--checkpoint`` picks
``checkpoints/<name>``, by default ``final``, what the pipeline decodes) or a checkpoint folder.
Exit status 2 with a one-line reason for a model that cannot be exported (a context model, dbsa)
or a missing checkpoint; DIR is then left as it was.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline_lib.layout import CKPT_CHOICES, CKPT_FINAL
from pipeline_lib.atomic import exits_on_full_disk


@exits_on_full_disk
def main(argv: Sequence[str] | None = None) -> int:
    try:
        from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES
    except ImportError:
        print("export: the ctranslate2 package is not installed (pip install -e '.[export]')",
              file=sys.stderr)
        return 2
    from pipeline_lib.export import ctranslate2 as ct2

    ap = argparse.ArgumentParser(prog="python -m pipeline_lib.export",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="target", required=True)
    p = sub.add_parser("ctranslate2", help="a CTranslate2 model directory (sentence-level models)")
    p.add_argument("source", type=Path, help="results/train_model/<job> or a checkpoint folder")
    p.add_argument("--output", type=Path, required=True, help="model directory to write")
    p.add_argument("--checkpoint", default=CKPT_FINAL, choices=CKPT_CHOICES,
                   help="checkpoint of a job folder (default: what the pipeline decodes)")
    p.add_argument("--quantization", default=None, choices=ACCEPTED_MODEL_TYPES,
                   help="CTranslate2 weight type (default: float32, as trained)")
    a = ap.parse_args(argv)
    try:
        out = ct2.export(a.source, a.output, a.checkpoint, a.quantization)
    except (ct2.ExportError, FileNotFoundError) as e:
        print(f"export: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
