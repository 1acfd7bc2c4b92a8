"""``python -m pipeline_lib.translate``: the user-facing name of
:mod:`pipeline_lib.evaluate.translate` (also the ``translate`` console script), beside
``python -m pipeline_lib.export``; the code lives with the evaluation stage it shares its
decoding with."""

import sys

from pipeline_lib.evaluate.translate import main

if __name__ == "__main__":
    sys.exit(main())
