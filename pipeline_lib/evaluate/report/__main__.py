"""``python -m pipeline_lib.evaluate.report``: the report's command line (build.main)."""

import sys

from pipeline_lib.evaluate.report.build import main

if __name__ == "__main__":
    sys.exit(main())
