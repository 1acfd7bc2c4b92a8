"""The run plan: from the validated config (pipeline_lib.run_config) to the jobs the rule files
declare.

WHY here and not in ``workflow/rules/*.smk``: planning (which training jobs exist and in what
order, what each is given, which systems are decoded and scored, which corpora each stage reads)
is ordinary Python that deserves unit tests (tests/unit/test_plan.py runs it on the default
config and every preset), and rule files that share globals depend on their include order. The
Snakefile builds one :class:`Plan` after validation and every rule file reads only it.

The plan has six parts, one module each, each with one reason to change:

* :class:`~pipeline_lib.plan.data.DataStages` (``data.py``): corpora, splits, BPE corpora,
  shards, test sets, parsing;
* :class:`~pipeline_lib.plan.training.TrainingJobs` (``training.py``): training jobs, their
  matched controls, random-context twins and seed replicas;
* :class:`~pipeline_lib.plan.train_inputs.TrainInputs` (``train_inputs.py``): what each
  training job is given (checkpoints, shards, aux stream, budget) and its priority;
* :class:`~pipeline_lib.plan.evaluation.Evaluation` (``evaluation.py``): the systems decoded
  and scored, their test sets and suites;
* :class:`~pipeline_lib.plan.targets.Targets` (``targets.py``): ``rule all``'s targets and the
  report's inputs;
* :class:`~pipeline_lib.plan.options.StageOptions` (``options.py``): what each rule hands its
  stage (one JSON, ``--options``), threads and cluster resources: rule files read no ``config``.

WHY one object over the parts: the rule files read ``plan.<name>`` for all of them, so the DAG
reads as one vocabulary; each part is a mixin over the shared ``config``, ``results`` and
``jobs`` and reads the others only through those names.

This package imports nothing heavy (no torch, no readers' libraries): building the DAG must not
need every stage's dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_lib.plan.data import DataStages
from pipeline_lib.plan.evaluation import Evaluation
from pipeline_lib.plan.options import StageOptions
from pipeline_lib.plan.targets import Targets
from pipeline_lib.plan.train_inputs import TrainInputs
from pipeline_lib.plan.training import TrainingJobs
from pipeline_lib.results import Results


class Plan(DataStages, TrainingJobs, TrainInputs, Evaluation, Targets, StageOptions):
    """Everything the rule files need to know about a validated config (module docstring)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        #: every stage output's path (pipeline_lib.results): rules, targets and report read them
        self.results = Results(config["results_dir"], config["resources_dir"])
        self._plan_jobs()
