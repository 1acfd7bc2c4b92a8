"""What a finished run's manifest says about it: how much it trained on, why it stopped, where
its best checkpoint is, and what besides code, config and data decided its weights.

WHY apart from the loop: the report and the fairness checks read these fields (matched
controls compare ``steps`` and ``target_tokens``; the verdict reads ``stop``), so they change
with what the report needs, not with how the trainer steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline_lib.training.reproducibility import determinants
from pipeline_lib.training.stopping import StopMetric, StopReason

if TYPE_CHECKING:
    from pipeline_lib.training.train import Trainer


def summarise(t: Trainer, reason: StopReason) -> None:
    """Fill ``t.manifest``'s counts and extra fields for a run that ended for ``reason``."""
    st = t.state
    t.manifest.counts = {"steps": st.step, "target_tokens": st.tokens,
                         "target_tokens_per_update": st.tokens / max(st.step, 1),
                         "epochs_started": st.position.epoch + 1,
                         "parameters": sum(p.numel() for p in t.model.parameters()),
                         "trainable_parameters": sum(p.numel() for p in t.trainable),
                         "frozen_parameters": len(t.frozen)}
    if t.inputs.heads:   # the share of training tokens that carried parse supervision
        sup = st.supervision
        t.manifest.counts["supervision"] = {
            **sup, "src_share": sup["src_heads"] / max(sup["src_tokens"], 1),
            "tgt_share": sup["tgt_heads"] / max(sup["tgt_tokens"], 1)}
    t.manifest.extra = {
        "best_dev_loss": st.best_dev if t.rule.metric is StopMetric.LOSS else None,
        "init_from": t.init_keys,
        "data_mode": t.inputs.mode.value,
        "dev_bleu_skipped": t.inputs.dev_bleu_skip,
        "aux_position": st.aux_position.to_dict(),
        "world_size": t.info.world_size, "device": str(t.device),
        "stop": {"reason": reason.value, "updates": st.step, "rule": t.rule.to_dict(),
                 "best": st.best_dev, "best_step": st.best_step,
                 "validations_without_gain": st.bad_evals,
                 "interruptions": t.attempts.interruptions()},
        "determinism": determinants(t.tcfg.seed, t.tcfg.num_workers, t.info.world_size,
                                    t.device),
        "phase_s": t.phases.totals(),
        "compiled_graphs": t.compiled.graphs if t.compiled else None}
