"""What the report reads and how: the records it fills (a training job's ``TrainRun``, all of
it in ``Inputs``) from the files the flags name, each recorded in the report's manifest and read
defensively (a file a stage did not write, or a line it did not finish, is a warning and shows
as "n/a", never a failure)."""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline_lib.manifest import Manifest

log = logging.getLogger("report")


@dataclass
class TrainRun:
    """One training job as the trainer left it (pipeline_lib.training.train): its
    ``manifest.json`` (None when not written) and the records of its ``metrics.jsonl``."""

    job: str
    manifest_path: Path
    manifest: dict | None
    metrics: list[dict]
    #: the job whose ``checkpoints/best`` it starts from (the plan's ``init_from``), or None
    parent: str | None = None

    @property
    def dev(self) -> list[dict]:
        """Validation records (``split: dev``), in update order."""
        return [r for r in self.metrics if r.get("split") == "dev" and "step" in r]

    @property
    def train_params(self) -> dict:
        return (self.manifest or {}).get("params", {}).get("train", {})

    @property
    def stop(self) -> dict:
        """The trainer's ``stop`` record (reason, updates, rule, best, best_step); {} if none."""
        return (self.manifest or {}).get("stop") or {}


@dataclass
class Inputs:
    """Everything the report reads, each from the file one flag names (None/empty = not read)."""

    scores: dict | None
    consistency: dict | None
    contrastive: dict[str, dict]
    suites: list[str]
    systems: dict[str, str]                  # evaluated system -> its training job, report order
    train: dict[str, TrainRun]               # every training job (controls, pre-training too)
    decode: dict[str, list[dict | None]]     # system -> its decode manifests, one per test set
    ingest: dict[str, dict | None]           # corpus -> ingest manifest
    shards: dict[str, dict | None]           # corpus -> make_shards manifest
    benchmarks: dict[str, list[dict | None]]  # rule -> one record per job
    config: dict
    # model -> (test set, context_cxmi record) per test set
    cxmi: dict[str, list[tuple[str, dict | None]]] = field(default_factory=dict)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        log.warning("%s: not read (%s)", path, e)
        return None


def read_metrics(path: Path) -> list[dict]:
    """Training curve records; unreadable lines are skipped with a warning naming the line."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        log.warning("%s: not read (%s)", path, e)
        return out
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s:%d: not JSON, skipped", path, i)
    return out


def read_benchmark(path: Path) -> dict[str, float] | None:
    """The numbers of a Snakemake benchmark file's first record (``s`` wall seconds,
    ``max_rss`` MB, ``cpu_time`` s, ...). Snakemake writes ``NA`` for what it could not measure
    (a job faster than its sampling interval): those fields are left out."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        log.warning("%s: not read (%s)", path, e)
        return None
    if len(lines) < 2:
        log.warning("%s: no benchmark record", path)
        return None
    record = {}
    for key, value in zip(lines[0].split("\t"), lines[1].split("\t")):
        try:
            record[key] = float(value)
        except ValueError:   # NA, and h:m:s (the same time as s)
            continue
    return record


def read_inputs(args: argparse.Namespace, manifest: Manifest) -> Inputs:
    """Read every file the flags name (each recorded in the report's manifest)."""
    def read(path: str | Path, reader: Callable[[Path], Any] = read_json) -> Any:
        manifest.add_input(path)
        return reader(Path(path))

    train = {job: TrainRun(job, Path(man), read(man), read(metrics, read_metrics), parent or None)
             for job, man, metrics, parent in args.train}
    decode: dict[str, list[dict | None]] = defaultdict(list)
    for system, path in args.decode:
        decode[system].append(read(path))
    cxmi: dict[str, list[tuple[str, dict | None]]] = defaultdict(list)
    for model, test_set, path in args.cxmi:
        cxmi[model].append((test_set, read(path)))
    benchmarks: dict[str, list[dict | None]] = defaultdict(list)
    for rule, path in args.benchmark:
        benchmarks[rule].append(read(path, read_benchmark))
    return Inputs(
        scores=read(args.scores),
        consistency=read(args.consistency) if args.consistency else None,
        contrastive={m: r for m, p in args.contrastive if (r := read(p)) is not None},
        suites=args.suites,
        systems=dict(args.system),
        train=train,
        decode=dict(decode),
        ingest={c: read(p) for c, p in args.ingest},
        shards={c: read(p) for c, p in args.shards},
        benchmarks=dict(benchmarks),
        config=json.loads(args.config_json),
        cxmi=dict(cxmi),
    )
