"""Document-level NMT reproduction pipeline: every stage's logic lives in this package.

Snakemake rules stay thin and call ``python -m pipeline_lib.<stage>``; see README.md.
"""

__version__ = "0.1.0"
