"""Training end to end on real shards: a copy task is learnt, kill -9 / SIGTERM and resume give
bit-identical parameters, two-step hooks (init_from + freeze), every registered model trains.
DDP over two CPU processes: test_ddp.py."""

from __future__ import annotations

import fnmatch
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pipeline_lib import checkpoint as ckpt
from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader
from pipeline_lib.training.resume import run_changes
from pipeline_lib.training.train import EXIT_REQUEUE, Trainer, train
from pipeline_lib.training.train_config import RESUMABLE_CHANGES, TrainConfig, run_record

from test_data import write_corpus  # tests/unit/training: the shared shard builder

ROOT = Path(__file__).resolve().parents[2]
TINY = {"name": "transformer", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
        "dec_layers": 1, "dropout": 0.1, "max_len": 64}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    shards, spm_model = write_corpus(root / "train")
    dev, _ = write_corpus(root / "dev", n_rows=40, n_shards=1, seed=9, spm_model=spm_model)
    return shards, dev, spm_model


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _cli(corpus, out: Path, train_cfg: dict) -> list[str]:
    shards, dev, spm_model = corpus
    cfg = json.dumps({"model": TINY, "train": train_cfg})
    return ["-m", "pipeline_lib.training.train", "--config-json", cfg, "--shards", str(shards),
            "--dev-shards", str(dev), "--spm", str(spm_model), "--out-dir", str(out)]


def _metrics(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_copy_task_learns_and_decodes(corpus, tmp_path):
    from pipeline_lib.models.search import BeamConfig, greedy_search

    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    model = {**TINY, "d_model": 64, "n_heads": 4, "d_ff": 128, "enc_layers": 2, "dec_layers": 2,
             "dropout": 0.0}
    cfg = TrainConfig(max_tokens=500, max_steps=800, warmup=50, lr=5e-3, validate_every=400,
                      save_every=400, log_every=50, average_last_k=2)
    assert train(model, cfg, shards, dev, spm_model, tmp_path) == 0
    m = _metrics(tmp_path)
    tr = [r["loss"] for r in m if r["split"] == "train"]
    assert tr[-1] < 0.5 * tr[0]
    devm = [r for r in m if r["split"] == "dev"]
    assert [r["step"] for r in devm] == [400, 800] and devm[-1]["bleu"] > 25
    for name in ("best", "last", "averaged", "step-400", "step-800"):
        assert ckpt.resolve_checkpoint(tmp_path / "checkpoints" / name), name
    assert ckpt.read_config(tmp_path / "checkpoints" / "averaged")["train"]["averaged"] == [
        "step-400", "step-800"]
    assert (tmp_path / "tb").is_dir() and json.loads((tmp_path / "manifest.json").read_text())[
        "counts"]["steps"] == 800
    # greedy decoding with the best checkpoint copies most dev sentences exactly
    net, _ = ckpt.load_model(tmp_path / "checkpoints" / "best")
    batch = next(b for _, b in TrainLoader(dev, LoaderConfig(max_tokens=2000)).iterate(DataPosition()))
    hyps = greedy_search(net, batch, BeamConfig(beam=1, greedy=True))
    refs = [[t for t in row if t > 3] for row in batch.tgt_out.tolist()]
    exact = sum(h[0].tokens == r for h, r in zip(hyps, refs))
    assert exact >= 0.5 * len(refs), f"{exact}/{len(refs)} copied"

    # two-step hooks: init from this checkpoint, freeze the encoder, train a few steps
    two = tmp_path / "two_step"
    cfg2 = TrainConfig(max_tokens=500, max_steps=5, warmup=1, lr=1e-3, validate_every=100,
                       save_every=100, dev_bleu=False, init_from=str(tmp_path / "checkpoints/best"),
                       freeze=("encoder.*",))
    assert train(model, cfg2, shards, dev, spm_model, two) == 0
    before, after = ckpt.load_state(tmp_path / "checkpoints/best"), ckpt.load_state(two / "checkpoints/last")
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("encoder."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("decoder."))
    man = json.loads((two / "manifest.json").read_text())
    assert man["init_from"] == {"missing": [], "unexpected": []} and man["counts"]["frozen_parameters"] > 0


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t = time.time()
    while not path.exists():
        assert proc.poll() is None, f"run ended (rc={proc.returncode}) before {path} appeared"
        assert time.time() - t < timeout, f"timeout waiting for {path}"
        time.sleep(0.02)


@pytest.mark.slow
def test_kill9_and_sigterm_resume_bit_identical(corpus, tmp_path):
    train_cfg = {"max_tokens": 300, "max_steps": 150, "warmup": 20, "lr": 2e-3,
                 "validate_every": 1000, "save_every": 10, "log_every": 10, "dev_bleu": False,
                 "keep_last": 2}
    ref, run = tmp_path / "ref", tmp_path / "run"
    subprocess.run([sys.executable, *_cli(corpus, ref, train_cfg)], env=_env(), check=True,
                   capture_output=True)
    # 1) SIGKILL after the step-20 checkpoint exists
    p = subprocess.Popen([sys.executable, *_cli(corpus, run, train_cfg)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(run / "checkpoints" / "step-20", p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = ckpt.load_trainer_state(run / "checkpoints" / "last")["step"]
    assert killed_at < 150
    # 2) resume, then SIGTERM (SLURM pre-emption): it saves and exits EXIT_REQUEUE
    p = subprocess.Popen([sys.executable, *_cli(corpus, run, train_cfg)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(run / "checkpoints" / f"step-{killed_at - killed_at % 10 + 30}", p)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    if p.returncode == 0:  # finished before the signal was handled: nothing left to test here
        pytest.fail("run finished before SIGTERM; raise max_steps")
    assert p.returncode == EXIT_REQUEUE, err
    assert f"resumed from {run / 'checkpoints' / 'last'} at step {killed_at}" in err
    termed_at = ckpt.load_trainer_state(run / "checkpoints" / "last")["step"]
    assert killed_at < termed_at < 150
    # 3) resume to the end
    done = subprocess.run([sys.executable, *_cli(corpus, run, train_cfg)], env=_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    a = ckpt.load_state(ref / "checkpoints" / "last")
    b = ckpt.load_state(run / "checkpoints" / "last")
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs by {(a[k] - b[k]).abs().max()}"
    sa = ckpt.load_trainer_state(ref / "checkpoints" / "last")
    sb = ckpt.load_trainer_state(run / "checkpoints" / "last")
    assert sa["position"] == sb["position"] and sa["step"] == sb["step"] == 150
    # metrics have one train record per logged step, no duplicates from the killed run
    steps = [r["step"] for r in _metrics(run) if r["split"] == "train"]
    assert steps == list(range(10, 151, 10))
    assert len(list((run / "checkpoints").glob("step-*"))) == 2
    # the manifest says how the job ended and which attempt a signal ended (the kill -9 left
    # no trace: nothing could be saved)
    stop = json.loads((run / "manifest.json").read_text())["stop"]
    assert stop["reason"] == "max_steps" and stop["updates"] == 150
    assert stop["interruptions"] == [{"step": termed_at, "signal": signal.SIGTERM}]


def _states(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {p.name: ckpt.load_state(p) for p in sorted((folder / "checkpoints").iterdir())
            if ckpt.resolve_checkpoint(p)}


@pytest.mark.slow
def test_two_runs_of_the_same_config_and_seed_give_identical_checkpoints(corpus, tmp_path):
    """Same commit, config, data, seed and thread count on CPU: every checkpoint (step-N, best,
    last) and every dev record repeats bit for bit, dropout included; another seed does not.
    Each run is its own process, as two runs of the pipeline are."""
    train_cfg = {"max_tokens": 300, "max_steps": 24, "warmup": 8, "lr": 2e-3,
                 "validate_every": 8, "save_every": 8, "log_every": 4, "keep_last": 3}
    runs = {}
    for name, seed in (("a", 1), ("b", 1), ("other_seed", 2)):
        out = tmp_path / name
        proc = subprocess.run([sys.executable, *_cli(corpus, out, {**train_cfg, "seed": seed})],
                              env=_env(), capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = out
    a, b, other = (_states(runs[n]) for n in ("a", "b", "other_seed"))
    assert set(a) == {"best", "best-kept", "final", "last", "step-8", "step-16",
                      "step-24"} == set(b)
    for name in a:
        for k in a[name]:
            assert torch.equal(a[name][k], b[name][k]), f"{name}/{k}"
    assert not torch.equal(a["last"]["embed.weight"], other["last"]["embed.weight"])
    dev = [[r for r in _metrics(runs[n]) if r["split"] == "dev"] for n in ("a", "b")]
    assert dev[0] == dev[1] and [r["step"] for r in dev[0]] == [8, 16, 24]
    det = [json.loads((runs[n] / "manifest.json").read_text())["determinism"] for n in "ab"]
    assert det[0] == det[1]
    assert det[0]["seed"] == 1 and det[0]["intra_op_threads"] == 1
    assert det[0]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert det[0]["bit_reproducible"].startswith("yes")


def test_stops_on_a_plateau_and_records_why(corpus, tmp_path):
    """A gain must exceed min_delta to restart patience: with a min_delta no gain reaches, the
    run stops after the first validation plus `patience` more; checkpoints/best still follows
    every improvement. Run again, it trains no further."""
    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    tcfg = TrainConfig(max_tokens=300, max_steps=60, warmup=4, lr=2e-3, validate_every=3,
                       save_every=3, log_every=3, dev_bleu=False, patience=2, min_delta=100.0)
    assert train(TINY, tcfg, shards, dev, spm_model, tmp_path) == 0
    man = json.loads((tmp_path / "manifest.json").read_text())
    dev_recs = [r for r in _metrics(tmp_path) if r["split"] == "dev"]
    assert [r["step"] for r in dev_recs] == [3, 6, 9]
    best = min(dev_recs, key=lambda r: r["loss"])
    assert man["counts"]["steps"] == 9
    assert man["stop"] == {"reason": "plateau", "updates": 9,
                           "rule": {"metric": "loss", "patience": 2, "min_delta": 100.0,
                                    "max_steps": 60},
                           "best": best["loss"], "best_step": best["step"],
                           "validations_without_gain": 2, "interruptions": []}
    assert man["best_dev_loss"] == best["loss"]
    assert train(TINY, tcfg, shards, dev, spm_model, tmp_path) == 0   # resumed: already done
    assert json.loads((tmp_path / "manifest.json").read_text())["stop"]["updates"] == 9
    assert [r["step"] for r in _metrics(tmp_path) if r["split"] == "train"][-1] == 9
    # no rule (patience 0): the cap
    capped = replace(tcfg, patience=0, max_steps=6)
    assert train(TINY, capped, shards, dev, spm_model, tmp_path / "capped") == 0
    stop = json.loads((tmp_path / "capped" / "manifest.json").read_text())["stop"]
    assert (stop["reason"], stop["updates"]) == ("max_steps", 6)


def test_a_time_budget_ends_the_run_as_a_finished_one(corpus, tmp_path):
    """Issue 33 item 5: train.max_seconds is a stop rule (fairseq's --stop-time-hours), not a
    signal: the run stops after the update that reaches it, validates, writes final and its
    manifest with the reason, so the stages after it (a matched control's budget, decoding)
    read a finished run."""
    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    tcfg = TrainConfig(max_tokens=300, max_steps=100_000, warmup=4, lr=2e-3, validate_every=50,
                       save_every=50, log_every=5, dev_bleu=False, max_seconds=1.5)
    t0 = time.monotonic()
    assert train(TINY, tcfg, shards, dev, spm_model, tmp_path) == 0
    assert time.monotonic() - t0 < 120
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["stop"]["reason"] == "max_seconds"
    assert 0 < man["stop"]["updates"] == man["counts"]["steps"] < 100_000
    assert (tmp_path / "checkpoints" / "final" / "model.pt").is_file()
    dev_steps = [r["step"] for r in _metrics(tmp_path) if r["split"] == "dev"]
    assert dev_steps[-1] == man["counts"]["steps"]                 # validated where it stopped
    with pytest.raises(ValueError, match="max_seconds=nan must be >= 0"):
        TrainConfig(max_seconds=float("nan"))


class _PreemptedAt(Trainer):
    """A trainer that SLURM pre-empts after update ``at``: a real SIGTERM to this process, which
    the trainer's handler turns into "save last, exit EXIT_REQUEUE" after that update."""

    at = 0

    def step(self, window) -> None:
        super().step(window)
        if self.state.step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def _preempt(corpus, tcfg: TrainConfig, out: Path, at: int) -> None:
    """Train ``out`` until a SIGTERM after update ``at``, then delete the rule's outputs as
    Snakemake does before its retry (``best``, ``final``, the manifest)."""
    shards, dev, spm_model = corpus
    trainer = _PreemptedAt(TINY, tcfg, shards, dev, spm_model, out)
    trainer.at = at
    assert trainer.run() == EXIT_REQUEUE
    assert ckpt.load_trainer_state(out / "checkpoints" / "last")["step"] == at
    for name in ("best", "final"):
        if (out / "checkpoints" / name).exists():
            shutil.rmtree(out / "checkpoints" / name)
    (out / "manifest.json").unlink(missing_ok=True)


def test_a_preempted_plateau_run_keeps_the_best_checkpoint_of_the_whole_run(corpus, tmp_path):
    """Issue 27, item 6: a plateau run whose dev curve has turned (best at an early validation,
    the later ones worse), pre-empted after its best validation; Snakemake deletes
    checkpoints/best before the retry. The resumed run ends with the same best dev value, step
    and weights in `best` and `final` as the uninterrupted run, not the best since the resume."""
    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    # lr 0.2 with no warm-up: the dev loss falls, then rises; patience 3 ends the run there
    tcfg = TrainConfig(max_tokens=300, max_steps=60, warmup=1, lr=0.2, validate_every=3,
                       save_every=3, log_every=3, dev_bleu=False, patience=3, num_workers=0,
                       keep_last=30)
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert train(TINY, tcfg, shards, dev, spm_model, ref) == 0
    stop = json.loads((ref / "manifest.json").read_text())["stop"]
    dev_recs = [r for r in _metrics(ref) if r["split"] == "dev"]
    best = stop["best_step"]
    # the curve has turned: every validation after the best one is worse than it
    assert stop["reason"] == "plateau" and best < dev_recs[-1]["step"] - 3, dev_recs
    later = [r["loss"] for r in dev_recs if r["step"] > best]
    assert len(later) == 3 and min(later) > stop["best"], dev_recs

    _preempt(corpus, tcfg, run, at=best + 2)        # after the best validation, not on a save
    assert train(TINY, tcfg, shards, dev, spm_model, run) == 0
    got = json.loads((run / "manifest.json").read_text())["stop"]
    assert got["interruptions"] == [{"step": best + 2, "signal": signal.SIGTERM}]
    assert {**got, "interruptions": []} == stop
    assert json.loads((run / "manifest.json").read_text())["best_dev_loss"] == stop["best"]
    for name in ("best", "final", "last"):
        a = ckpt.load_state(ref / "checkpoints" / name)
        b = ckpt.load_state(run / "checkpoints" / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    # best holds the weights of the best step (the step checkpoint saved right after it)
    a = ckpt.load_state(run / "checkpoints" / f"step-{best}")
    b = ckpt.load_state(run / "checkpoints" / "best")
    assert all(torch.equal(a[k], b[k]) for k in a)


def _preempted_at_3(corpus, tmp_path: Path) -> tuple[TrainConfig, Path]:
    """A 6-update run validating and saving every 2 updates, pre-empted after update 3."""
    torch.set_num_threads(1)
    tcfg = TrainConfig(max_tokens=300, max_steps=6, warmup=2, validate_every=2, save_every=2,
                       log_every=2, dev_bleu=False, num_workers=0)
    run = tmp_path / "job"
    _preempt(corpus, tcfg, run, at=3)
    return tcfg, run


def test_best_kept_of_another_step_is_not_taken_for_best(corpus, tmp_path):
    """When ``best-kept`` does not hold the weights of the best step that ``last`` records (a
    SIGKILL after a new best and before the next save), the resumed run does not take it: it
    forgets the best value and chooses ``best`` again from its next validation."""
    import yaml

    tcfg, run = _preempted_at_3(corpus, tmp_path)
    assert ckpt.load_trainer_state(run / "checkpoints" / "last")["best_step"] == 2
    meta = run / "checkpoints" / "best-kept" / "config.yaml"
    assert yaml.safe_load(meta.read_text())["train"]["best_step"] == 2
    meta.write_text(meta.read_text().replace("best_step: 2", "best_step: 5"))
    done = _run(corpus, run, tcfg.to_dict())
    assert done.returncode == 0, done.stderr
    assert "no weights of the best step 2" in done.stderr
    stop = json.loads((run / "manifest.json").read_text())["stop"]
    assert stop["best_step"] in (4, 6)
    kept = ckpt.read_config(run / "checkpoints" / "best")["train"]
    assert (kept["best_step"], kept["best_dev"]) == (stop["best_step"], stop["best"])


def test_a_damaged_last_falls_back_to_the_newest_intact_step_checkpoint(corpus, tmp_path):
    """Issue 36, item 1: a truncated `last/trainer_state.pt` (a node lost outside the atomic
    path, a full disk) ended every retry in torch's zip-archive error until someone deleted
    `last` by hand. The resume now falls back to the newest intact step checkpoint (step-2 here,
    `last` being update 3), says so, and ends on the weights of an uninterrupted run; with no
    intact step checkpoint it sets `last` aside and starts again."""
    tcfg, run = _preempted_at_3(corpus, tmp_path)
    shards, dev, spm_model = corpus
    ref = tmp_path / "ref"
    assert train(TINY, tcfg, shards, dev, spm_model, ref) == 0
    state = run / "checkpoints" / "last" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:100])
    done = _run(corpus, run, tcfg.to_dict(), "--attempt", "2")
    assert done.returncode == 0, done.stderr
    assert f"resume: {state}: damaged checkpoint file, 100 bytes where" in done.stderr
    assert "last replaced by step-2, the newest intact step checkpoint" in done.stderr
    assert "interrupted at step 2: resuming" in done.stderr
    for name in ("final", "last"):
        a = ckpt.load_state(ref / "checkpoints" / name)
        b = ckpt.load_state(run / "checkpoints" / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name

    tcfg, run = _preempted_at_3(corpus, tmp_path / "none")
    for name in ("last", "step-2"):
        model = run / "checkpoints" / name / "model.pt"
        model.write_bytes(model.read_bytes()[:-10])
    done = _run(corpus, run, tcfg.to_dict(), "--attempt", "2")
    assert done.returncode == 0, done.stderr
    assert "no intact step checkpoint to fall back on" in done.stderr
    assert "no checkpoints/last: training from scratch" in done.stderr
    assert (run / "last.damaged" / "model.pt").is_file()


def test_stale_temporary_checkpoints_are_swept_at_start(corpus, tmp_path):
    """Issue 27, item 7: a kill in mid-save leaves `checkpoints/.<name>.tmp-<pid>`; the next
    start of the job (here a resume) removes it, and nothing outside the job's checkpoints."""
    tcfg, run = _preempted_at_3(corpus, tmp_path)
    stale = [run / "checkpoints" / ".step-4.tmp-123", run / "checkpoints" / ".last.tmp-123"]
    for d in stale:
        d.mkdir()
        (d / "model.pt").write_bytes(b"half a save")
    other = tmp_path / ".step-4.tmp-123"          # not this job's checkpoints: left alone
    other.mkdir()
    assert train(TINY, tcfg, *corpus, run) == 0
    assert not any(d.exists() for d in stale)
    assert other.is_dir()
    assert not list((run / "checkpoints").glob(".*"))
    assert ckpt.load_trainer_state(run / "checkpoints" / "last")["step"] == 6


def test_phase_times_say_where_an_update_goes(corpus, tmp_path):
    """train.phase_times: every train record and the manifest carry wall seconds per phase
    (pipeline_lib/training/phases.py); the phases account for the loop's time, so their sum is
    positive and each is at least 0. Off (the default), neither carries them."""
    from pipeline_lib.training.phases import PHASES

    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    tcfg = TrainConfig(max_tokens=300, max_steps=6, warmup=2, validate_every=6, save_every=6,
                       log_every=3, dev_bleu=False, num_workers=0, phase_times=True)
    assert train(TINY, tcfg, shards, dev, spm_model, tmp_path / "timed") == 0
    records = [r for r in _metrics(tmp_path / "timed") if r["split"] == "train"]
    assert [r["step"] for r in records] == [3, 6]
    for r in records:
        assert set(r["phase_s"]) == set(PHASES) and min(r["phase_s"].values()) >= 0
        assert r["phase_s"]["forward"] > 0 and r["phase_s"]["backward"] > 0
    totals = json.loads((tmp_path / "timed" / "manifest.json").read_text())["phase_s"]
    assert totals["forward"] >= records[0]["phase_s"]["forward"]
    assert train(TINY, replace(tcfg, phase_times=False), shards, dev, spm_model,
                 tmp_path / "plain") == 0
    assert not any("phase_s" in r for r in _metrics(tmp_path / "plain"))
    assert json.loads((tmp_path / "plain" / "manifest.json").read_text())["phase_s"] is None


def test_averaging_without_a_step_checkpoint_decodes_best(corpus, tmp_path):
    """average_last_k > 1 but save_every beyond the updates run (a short run, the README's
    trainer_efficiency command): no step checkpoint to average, so final is best, said in the
    log, where finish() used to crash (average_states: no checkpoints given)."""
    torch.set_num_threads(1)
    shards, dev, spm_model = corpus
    tcfg = TrainConfig(max_tokens=300, max_steps=3, warmup=1, validate_every=3, save_every=50,
                       log_every=3, dev_bleu=False, num_workers=0, average_last_k=3)
    assert train(TINY, tcfg, shards, dev, spm_model, tmp_path) == 0
    ck = tmp_path / "checkpoints"
    assert (ck / "final" / "model.pt").read_bytes() == (ck / "best" / "model.pt").read_bytes()
    assert not (ck / "averaged").exists()


def test_a_bleu_rule_needs_dev_bleu(corpus, tmp_path):
    shards, dev, spm_model = corpus
    tcfg = TrainConfig(max_steps=2, patience=1, stop_metric="bleu", dev_bleu=False)
    with pytest.raises(ValueError, match="stop_metric=bleu needs dev BLEU"):
        train(TINY, tcfg, shards, dev, spm_model, tmp_path)
    with pytest.raises(ValueError, match="train.stop_metric='ppl'"):
        TrainConfig(stop_metric="ppl")


def test_resume_only_the_same_run():
    cfg = TrainConfig(max_steps=10, lr=1e-3)
    inputs = {"shards": "a" * 64}
    saved = {"model": dict(TINY), "train": run_record(cfg, TINY["name"], inputs)}

    def changes(model: dict, tcfg: TrainConfig, now: dict = inputs) -> list[str]:
        return run_changes(saved, model, run_record(tcfg, TINY["name"], now), RESUMABLE_CHANGES)

    assert changes(dict(TINY), TrainConfig(max_steps=50, lr=1e-3, validate_every=7)) == []
    assert changes(dict(TINY), TrainConfig(max_steps=10, lr=2e-3)) == ["train.lr"]
    assert changes({**TINY, "d_model": 64}, cfg) == ["model"]
    assert changes(dict(TINY), cfg, {"shards": "b" * 64}) == ["input shards"]
    other_code = {**saved, "train": {**saved["train"], "code_hash": "0" * 16}}
    assert run_changes(other_code, dict(TINY), run_record(cfg, TINY["name"], inputs),
                       RESUMABLE_CHANGES) == ["training code"]
    with pytest.raises(ValueError, match="unknown train config keys"):
        TrainConfig.from_dict({"corpus": "bible"})


def _run(corpus, out: Path, train_cfg: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *_cli(corpus, out, train_cfg), *extra], env=_env(),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_finished_run_trains_again_from_scratch_an_interrupted_one_resumes(corpus, tmp_path):
    """Issue 23, item 1: `snakemake --forcerun train_model` (or a raised max_steps) used to
    "resume" the finished run, i.e. only re-validate it. A finished run is now trained again
    from scratch, an interrupted one resumed, and one whose inputs changed started afresh; the
    manifest lists each attempt with its time."""
    cfg = {"max_tokens": 300, "max_steps": 8, "warmup": 4, "validate_every": 8, "save_every": 4,
           "log_every": 2, "dev_bleu": False}
    run = tmp_path / "run"
    first = _run(corpus, run, cfg)
    assert first.returncode == 0, first.stderr
    assert "attempt 1: no checkpoints/last: training from scratch" in first.stderr
    weights = ckpt.load_state(run / "checkpoints" / "last")

    again = _run(corpus, run, cfg, "--attempt", "1")       # what --forcerun starts
    assert again.returncode == 0, again.stderr
    assert "is a run that finished at step 8" in again.stderr and "resumed from" not in again.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    (attempt,) = manifest["attempts"]
    assert (attempt["start_step"], attempt["step"], attempt["end"]) == (0, 8, "finished")
    assert manifest["attempt_seconds_total"] == attempt["seconds"] > 0
    assert [r["step"] for r in _metrics(run) if r["split"] == "train"] == [2, 4, 6, 8]
    again_weights = ckpt.load_state(run / "checkpoints" / "last")   # same seed: same result
    assert all(torch.equal(weights[k], again_weights[k]) for k in weights)

    # Snakemake's retry of a job killed after its trainer finished (issue 33: at the time limit)
    final = ckpt.load_state(run / "checkpoints" / "final")
    for name in ("best", "final"):                          # Snakemake deletes the outputs
        shutil.rmtree(run / "checkpoints" / name)
    (run / "manifest.json").unlink()
    retry = _run(corpus, run, cfg, "--attempt", "2")
    assert retry.returncode == 0, retry.stderr
    assert "finished at step 8 by an earlier attempt" in retry.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert [(a["attempt"], a["start_step"], a["step"], a["end"]) for a in manifest["attempts"]] \
        == [(1, 0, 8, "finished"), (2, 8, 8, "finished")]
    assert manifest["stop"]["reason"] == "max_steps"
    assert [r["step"] for r in _metrics(run) if r["split"] == "train"] == [2, 4, 6, 8]
    refinished = ckpt.load_state(run / "checkpoints" / "final")
    assert all(torch.equal(final[k], refinished[k]) for k in final)

    longer = _run(corpus, run, {**cfg, "max_steps": 12})    # a raised max_steps: a new run
    assert longer.returncode == 0, longer.stderr
    assert "finished at step 8" in longer.stderr
    (attempt,) = json.loads((run / "manifest.json").read_text())["attempts"]
    assert (attempt["start_step"], attempt["step"]) == (0, 12)

    # interrupted (SIGTERM after step 4), then resumed: two attempts in the manifest
    slow = {**cfg, "max_steps": 400, "save_every": 4, "validate_every": 1000}
    part = tmp_path / "part"
    p = subprocess.Popen([sys.executable, *_cli(corpus, part, slow)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(part / "checkpoints" / "step-4", p)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=120) == EXIT_REQUEUE
    stopped = ckpt.load_trainer_state(part / "checkpoints" / "last")["step"]
    resumed = _run(corpus, part, {**slow, "max_steps": stopped + 4}, "--attempt", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert f"interrupted at step {stopped}: resuming" in resumed.stderr
    attempts = json.loads((part / "manifest.json").read_text())["attempts"]
    assert [(a["attempt"], a["start_step"], a["step"], a["end"]) for a in attempts] == [
        (1, 0, stopped, "signal 15"), (2, stopped, stopped + 4, "finished")]

    # the inputs' checksums are part of the run (tests/unit/training/test_resume.py: an interrupted run
    # with other inputs is not continued either)
    shards, dev, spm_model = corpus
    moved = _run((dev, dev, spm_model), part, {**slow, "max_steps": 4})
    assert moved.returncode == 0, moved.stderr
    assert "belongs to another run (changed: input shards)" in moved.stderr


# ------------------------------------------------------------------ every registered model

from test_data import write_doc_corpus  # noqa: E402

DOC_TINY = {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1, "dec_layers": 1,
            "dropout": 0.1, "max_len": 64}
EXTRAS = {"doct": {"context_sentences": 2}, "camn": {"memory_sentences": 2, "memory_mode": "weighted"},
          "cache": {"cache_size": 5}, "crosstask": {"max_sentences": 3}}
TWO_STEP = ("doct", "camn", "cache")   # trained on top of a frozen sentence-level checkpoint


@pytest.fixture(scope="module")
def doc_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctrain")
    doc, restore, spm_model = write_doc_corpus(root / "train", n_docs=24)
    dev, _, _ = write_doc_corpus(root / "dev", n_docs=5, n_shards=1, seed=3, spm_model=spm_model)
    base = root / "base"
    quick = TrainConfig(max_steps=2, warmup=2, validate_every=2, save_every=2, log_every=1,
                        max_tokens=200, dev_bleu=False, device="cpu")
    assert train({**DOC_TINY, "name": "transformer"}, quick, doc, dev, spm_model, base) == 0
    return doc, restore, dev, spm_model, base / "checkpoints" / "last"


def _registry():
    from pipeline_lib.models.registry import MODELS

    return sorted(MODELS)


@pytest.mark.parametrize("name", _registry())
def test_every_registered_model_trains(doc_corpus, tmp_path, name):
    """A few updates of every model through train() with the loader its data_mode asks for:
    finite losses, dev loss (and BLEU where defined), and for two-step models the
    ``@sentence_level`` parameters bit-identical to the sentence-level checkpoint."""
    torch.set_num_threads(1)
    doc, restore, dev, spm_model, base = doc_corpus
    two_step = name in TWO_STEP
    tcfg = TrainConfig(max_steps=4, warmup=2, validate_every=4, save_every=4, log_every=1,
                       max_tokens=200, device="cpu", dev_bleu=True,
                       init_from=str(base) if two_step else None,
                       freeze=("@sentence_level",) if two_step else (),
                       aux_ratio=0.5 if name == "crosstask" else 0.0)
    aux = restore if name == "crosstask" else None
    model = {**DOC_TINY, "name": name, "extras": EXTRAS.get(name, {})}
    assert train(model, tcfg, doc, dev, spm_model, tmp_path, aux) == 0
    recs = _metrics(tmp_path)
    train_recs = [r for r in recs if r["split"] == "train"]
    assert len(train_recs) == 4 and all(math.isfinite(r["loss"]) for r in train_recs)
    dev_rec = [r for r in recs if r["split"] == "dev"][-1]
    assert math.isfinite(dev_rec["loss"])
    assert ("bleu" in dev_rec) == (name != "cache")   # cache: skipped with a logged reason
    counts = json.loads((tmp_path / "manifest.json").read_text())["counts"]
    assert counts["steps"] == 4 and counts["target_tokens"] > 0
    assert counts["target_tokens_per_update"] == counts["target_tokens"] / 4
    last = tmp_path / "checkpoints" / "last"
    state = ckpt.load_state(last)
    if two_step:
        before = ckpt.load_state(base)
        from pipeline_lib.models.registry import MODELS

        frozen = [k for k in state if any(fnmatch.fnmatchcase(k, p)
                                          for p in MODELS[name].sentence_level_prefixes())]
        assert frozen and all(torch.equal(state[k], before[k]) for k in frozen)
        assert set(frozen) == set(before)   # exactly the sentence-level checkpoint's parameters
    if name == "crosstask":
        ts = ckpt.load_trainer_state(last)
        assert ts["aux_position"]["batches"] == 2 and ts["position"]["batches"] == 2


def test_dbsa_manifest_records_the_supervised_share(tmp_path):
    """DBSA on shards where every third row has a parse: every row trains, the parsed ones with
    their heads, and the manifest says which share of the tokens carried supervision."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    torch.set_num_threads(1)
    _, spm_model = write_corpus(tmp_path / "spm", n_rows=60, n_shards=1)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    rng = __import__("random").Random(5)
    words = "casa perro gato libro agua tierra cielo mar sol luna".split()
    rows, want = [], [0, 0]
    for i in range(120):
        ids = sp.encode(" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))))
        parsed = i % 3 == 0
        heads = [min(j + 1, len(ids) - 1) for j in range(len(ids))] if parsed else None
        rows.append({"doc_id": f"d{i // 6}", "sent_idx": i % 6, "src_ids": ids, "tgt_ids": ids,
                     "src_heads": heads, "tgt_heads": heads})
        want[0] += len(ids) * parsed
        want[1] += len(ids)
    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), shards / "shard-00000.parquet", row_group_size=40)
    tcfg = TrainConfig(max_steps=6, warmup=2, validate_every=6, save_every=6, log_every=2,
                       max_tokens=300, device="cpu", dev_bleu=False)
    model = {**DOC_TINY, "name": "dbsa", "extras": {}}
    assert train(model, tcfg, shards, shards, spm_model, tmp_path / "run") == 0
    counts = json.loads((tmp_path / "run" / "manifest.json").read_text())["counts"]
    sup = counts["supervision"]
    assert sup["src_heads"] == sup["tgt_heads"] > 0 and sup["src_tokens"] == sup["tgt_tokens"]
    # 6 steps of ~300 padded tokens see part of the 120 rows; the share matches the data's
    assert abs(sup["src_share"] - want[0] / want[1]) < 0.15
    recs = [r for r in _metrics(tmp_path / "run") if r["split"] == "train"]
    assert all("parse_loss_enc" in r and "parse_loss_dec" in r for r in recs)


@pytest.mark.slow
def test_sigterm_to_the_whole_process_group_saves_with_loader_workers(corpus, tmp_path):
    """SLURM signals every process of the job step, the loader's worker processes too: they
    ignore it (data.ignore_stop_signals), so the trainer is not killed by "DataLoader worker
    ... is killed by signal" and saves ``last`` before exiting EXIT_REQUEUE."""
    train_cfg = {"max_tokens": 300, "max_steps": 400, "warmup": 20, "lr": 2e-3,
                 "validate_every": 1000, "save_every": 10, "log_every": 10, "dev_bleu": False,
                 "num_workers": 2}
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, *_cli(corpus, run, train_cfg)], env=_env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)   # its own process group, as a job step's tasks
    _wait_for(run / "checkpoints" / "step-20", p)
    workers = subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True,
                             check=False).stdout.split()
    assert len(workers) >= 3, workers          # the trainer and its two loader workers
    os.killpg(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == EXIT_REQUEUE, err[-3000:]
    assert "is killed by signal" not in err
    assert 20 <= ckpt.load_trainer_state(run / "checkpoints" / "last")["step"] < 400


@pytest.mark.parametrize("damage", ["truncated", "not parquet"])
def test_a_damaged_training_shard_is_named_in_one_line_and_exits_2(corpus, tmp_path, damage):
    """Issue 36, item 1: a training shard cut short (a copy that stopped, a full disk) or
    overwritten with other bytes crashed the trainer with a pyarrow stack; now one line names
    the file and says how to rebuild it, exit 2."""
    shards, dev, spm_model = corpus
    broken = tmp_path / "shards"
    shutil.copytree(shards, broken)
    shard = sorted(broken.glob("shard-*.parquet"))[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"PAR1" + data[4:40])
    done = subprocess.run([sys.executable, *_cli((broken, dev, spm_model), tmp_path / "run",
                                                 {"max_steps": 2, "device": "cpu"})],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("train: error:")]
    assert f"{shard}: damaged shard, cannot read" in line and "--forcerun make_shards" in line
