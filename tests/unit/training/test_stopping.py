"""The stop rule (pipeline_lib/training/stopping.py): a gain must exceed min_delta to restart
patience, checkpoints/best follows every improvement, BLEU counts upwards, patience 0 never
stops early."""

from __future__ import annotations

import math

import pytest

from pipeline_lib.training.stopping import StopMetric, StopRule, judge


def run(rule: StopRule, values: list[float]) -> tuple[int | None, list[int], int]:
    """Validations ``values`` in order under ``rule``: (index where the run stops, or None;
    indices of new bests; the patience counter at the end)."""
    best = reference = rule.worst
    bad, bests = 0, []
    for i, value in enumerate(values):
        v = judge(rule, value, best, reference, bad)
        if v.new_best:
            best = value
            bests.append(i)
        if v.gained:
            reference = value
        bad = v.bad_evals
        if rule.plateaued(bad):
            return i, bests, bad
    return None, bests, bad


def test_loss_plateau_with_min_delta():
    rule = StopRule(StopMetric.LOSS, patience=2, min_delta=0.05)
    # 3.40 -> 3.30 gains; 3.27 and 3.26 improve (new bests) by less than 0.05 on 3.30: stop
    assert run(rule, [3.5, 3.4, 3.3, 3.27, 3.26, 3.0]) == (4, [0, 1, 2, 3, 4], 2)
    # small gains that add up past min_delta restart patience
    assert run(rule, [3.5, 3.47, 3.44, 3.41, 3.38]) == (None, [0, 1, 2, 3, 4], 0)


def test_bleu_counts_upwards_and_a_worse_value_is_no_best():
    rule = StopRule(StopMetric.BLEU, patience=2, min_delta=0.5)
    assert rule.worst == -math.inf
    assert run(rule, [10.0, 12.0, 11.0, 12.3, 12.4]) == (3, [0, 1, 3], 2)


def test_patience_zero_never_stops_and_ties_are_no_gain():
    assert run(StopRule(patience=0), [5.0, 5.0, 6.0, 7.0]) == (None, [0], 3)
    assert run(StopRule(patience=1), [5.0, 5.0]) == (1, [0], 1)   # equal: not better


def test_bad_rules_are_refused():
    with pytest.raises(ValueError):
        StopRule(patience=-1)
    with pytest.raises(ValueError):
        StopRule(min_delta=-0.1)
