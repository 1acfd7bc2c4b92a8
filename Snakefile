"""Document-level NMT, raw corpora to a scored report. See README.md."""

import sys
from pathlib import Path

from snakemake.utils import min_version, validate

# The rules and the preset step below import pipeline_lib from this checkout.
sys.path.insert(0, workflow.basedir)

min_version("9.0")


configfile: "config/config.yaml"


# `--config preset=<name>`: a paper's setup from config/presets/ replaces whole sections of the
# default (pipeline_lib/presets.py says why); command-line values still win.
if config.get("preset"):
    from pipeline_lib.presets import apply_preset

    apply_preset(
        config,
        Path(workflow.basedir, "config", "presets"),
        workflow.config_settings.overwrite_config,
    )


validate(config, "workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"


# Every stage's rules live in workflow/rules/<stage>.smk; common.smk (above) comes first.
for _rules in sorted(Path(workflow.basedir, "workflow", "rules").glob("*.smk")):
    if _rules.name != "common.smk":

        include: str(_rules)


rule all:
    default_target: True
    input:
        final_targets(),
