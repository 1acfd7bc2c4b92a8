"""Document-level NMT, raw corpora to a scored report. See README.md."""

import shlex
import sys

from snakemake.utils import min_version

# The rules and the planning below import pipeline_lib from this checkout; so do the jobs
# (`python -m pipeline_lib...`), also from a working folder outside it (`-s`/`--directory`) and
# in a rule's conda environment, which has the dependencies but not this package.
sys.path.insert(0, workflow.basedir)
# (the prefix is formatted like a shell command: {{ }} for the shell's braces)
shell.prefix(
    f"export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
)

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from pipeline_lib import failed_jobs
from pipeline_lib.cancel_on_sigterm import cancel_on_sigterm
from pipeline_lib.slurm_ended_jobs import fail_ended_jobs
from pipeline_lib.config_files import ConfigError, check_files, command_line_config
from pipeline_lib.plan import Plan
from pipeline_lib.run_config import prepare_config
from pipeline_lib.training.submit_checks import partition_warnings, submit_problem
from pipeline_lib.training.slurm_extra import signal_warning_s, train_slurm_extra

min_version("9.0")


configfile: "config/config.yaml"


# Every config file is read again refusing a key given twice (YAML keeps the last silently), and
# every --config value as YAML 1.2 (Snakemake reads nested ones as strings: seeds='[1, 2]').
# `--config preset=<name>` applies a paper's setup (config/presets/; command-line values still
# win), then the config is validated against workflow/schemas/config.schema.yaml, which fills in
# every default. A refused config is a WorkflowError: its message, not a Python stack.
# `plan` (pipeline_lib/plan/) is all the rule files read.
try:
    check_files(workflow.configfiles)
    overrides, cli = command_line_config(config, workflow.config_settings)
    prepare_config(config, overrides, cli, workflow.config_settings.configfiles)
except ConfigError as e:
    raise WorkflowError(str(e)) from None
plan = Plan(config)


include: "workflow/rules/download.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/parse.smk"
include: "workflow/rules/preprocess.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/decode.smk"
include: "workflow/rules/score.smk"
include: "workflow/rules/report.smk"


# Under SLURM, what would end every training job at its start (its partition pre-empts by
# CANCEL, --no-requeue, a node count other than cluster.nodes:
# pipeline_lib.training.submit_checks) stops the run once, before any submission; other jobs'
# partitions that pre-empt by CANCEL get a warning (partition_warnings). SIGTERM to this
# Snakemake cancels the run's SLURM jobs as Ctrl-C does (pipeline_lib/cancel_on_sigterm.py).
onstart:
    if (
        workflow.executor_plugin is not None
        and workflow.executor_plugin.name == "slurm"
    ):
        # the plugin's name for every job of this run (its executor's run_uuid), if it has one
        executor = getattr(workflow.scheduler, "_executor", None)
        cancel_on_sigterm(logger.warning, getattr(executor, "run_uuid", None))
        # PREEMPTED / NODE_FAIL jobs SLURM will not requeue fail at the next status poll
        fail_ended_jobs(executor, logger.warning)
        resources = workflow.resource_settings
        for warning in partition_warnings(
            resources.default_resources, resources.overwrite_resources
        ):
            logger.warning(f"Warning: {warning}")
        if any(j.rule.name == "train_model" for j in workflow.dag.needrun_jobs()):
            problem = submit_problem(
                resources.overwrite_resources,
                bool(getattr(workflow.executor_settings, "no_requeue", False)),
                resources.default_resources,
                plan.train_resources()["nodes"],
            )
            if problem:
                raise WorkflowError(problem)


# A failed job's error (file and line) is in its log: print its last lines on the console too.
onerror:
    failed_jobs.report(log)


rule all:
    default_target: True
    input:
        plan.final_targets(),
