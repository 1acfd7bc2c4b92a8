"""Per-update dropout seeds and the manifest's record of what decides a run's weights
(pipeline_lib/training/reproducibility.py)."""

from __future__ import annotations

import torch

from pipeline_lib.training.reproducibility import determinants, seed_step, step_seed


def test_step_seeds_differ_by_seed_update_and_rank_and_repeat():
    seeds = {(s, k, r): step_seed(s, k, r) for s in (1, 2, 3) for k in range(50) for r in (0, 1)}
    assert len(set(seeds.values())) == len(seeds)
    # seed + update would give seed 2's update k the masks of seed 1's update k + 1
    assert step_seed(2, 0) != step_seed(1, 1)
    assert step_seed(7, 11, 1) == step_seed(7, 11, 1) and 0 <= step_seed(7, 11) < 2 ** 63


def test_dropout_masks_depend_on_the_update_not_on_earlier_draws():
    """What drew from the global generator before (a loader, another model's init, a resumed
    run's different history) does not change update k's masks."""
    drop = torch.nn.Dropout(0.5)
    x = torch.ones(64, 32)
    seed_step(1, 5, torch.device("cpu"))
    first = drop(x)
    torch.rand(1000)                      # someone else draws in between
    seed_step(1, 5, torch.device("cpu"))
    assert torch.equal(drop(x), first)
    seed_step(1, 6, torch.device("cpu"))
    assert not torch.equal(drop(x), first)


def test_determinants_name_what_decides_the_weights():
    record = determinants(3, 2, 1, torch.device("cpu"))
    assert record["seed"] == 3 and record["num_workers"] == 2 and record["world_size"] == 1
    assert record["torch"] == torch.__version__ and record["intra_op_threads"] >= 1
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["autocast"] == "fp32" and record["bit_reproducible"].startswith("yes")


def test_data_order_does_not_depend_on_which_loader_worker_is_slow(tmp_path, monkeypatch):
    """The batches of an epoch come from the workers in turn, whichever finishes first: slowing
    one worker or the other (the timing a loaded machine varies) gives the same sequence, also
    where the workers hold unequal shares (7 row groups for 2 workers)."""
    import time

    from torch.utils.data import get_worker_info

    from pipeline_lib.training import data
    from pipeline_lib.training.data import DataPosition, LoaderConfig, TrainLoader

    from test_data import write_corpus

    shards, _ = write_corpus(tmp_path, n_rows=350, n_shards=1, row_group=50)
    cfg = LoaderConfig(max_tokens=120, buffer_sents=40, num_workers=2, seed=3)
    read = data.read_columns

    def sequence(slow: int | None) -> list[torch.Tensor]:
        def slowed(units, with_heads, inputs):   # runs in the forked worker processes
            info = get_worker_info()
            if info is not None and info.id == slow:
                time.sleep(0.05)
            return read(units, with_heads, inputs)

        monkeypatch.setattr(data, "read_columns", slowed)
        return [b.src for _, b in TrainLoader(shards, cfg).iterate(DataPosition())]

    plain = sequence(None)
    assert len(plain) > 14
    for slow in (0, 1):
        seq = sequence(slow)
        assert len(seq) == len(plain) and all(map(torch.equal, seq, plain)), slow
