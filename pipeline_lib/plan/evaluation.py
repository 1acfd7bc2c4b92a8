"""The evaluation part of the plan: the systems decoded and scored (each model, its sentence-level
decoding where it has one, and every matched control), their test sets, the contrastive suites,
and the flags that name the test sets to the scoring stages (their settings:
:mod:`pipeline_lib.plan.options`). No I/O.
"""

from __future__ import annotations

from pipeline_lib.codehash import code_hash
from pipeline_lib.context_conditions import CONTEXT_CONDITIONS, CONTEXT_MODELS
from pipeline_lib.layout import SENT_SUFFIX

ABLATED = "_ctx_"   # <model>_ctx_<condition>: <model> decoded with that context (ablations)


class Evaluation:
    """Systems, test sets and suites (a part of :class:`pipeline_lib.plan.Plan`)."""

    @property
    def systems(self) -> dict[str, tuple[str, str]]:
        """Evaluated system -> (training job, decode unit). A model with
        ``model_settings.<m>.sentence_decode`` (cross-task: the paper's "translate sentences"
        mode) is decoded a second time, each sentence alone, as its own row ``<m>_sent``."""
        out = {m: (m, "document") for m in self.models}
        for m in self.models:
            if self.config["model_settings"][self.replicas.get(m, (m,))[0]]["sentence_decode"]:
                out[f"{m}{SENT_SUFFIX}"] = (m, "sentence")
        for c in [*dict.fromkeys(self.controls.values()), *self.twins.values()]:
            out.setdefault(c, (c, "document"))
        for system, (model, _) in self.ablations.items():
            out[system] = (model, "document")
        return out

    @property
    def ablations(self) -> dict[str, tuple[str, str]]:
        """Test-time context ablations (config score.context_ablation): system
        ``<m>_ctx_random`` / ``<m>_ctx_empty`` -> (model ``m``, condition), for every evaluated
        context-rule model: decoded again with other documents' sentences, or none, as its
        context, and scored against its own true-context decoding."""
        if not self.config["score"]["context_ablation"]:
            return {}
        return {f"{m}{ABLATED}{condition}": (m, condition) for m in self.models
                if self.jobs[m].model["name"] in CONTEXT_MODELS
                for condition in CONTEXT_CONDITIONS if condition != "true"}

    def decode_context(self, system: str) -> str:
        """The context condition a system is decoded with (true but for an ablation)."""
        return self.ablations.get(system, (system, "true"))[1]

    def against(self) -> list[tuple[str, str, str]]:
        """(model, other system, kind) of each context control the scores test a model
        against: its random-context twin and its ablated decodings."""
        out = [(m, t, "twin") for m, t in self.twins.items()]
        return out + [(m, s, f"ctx_{c}") for s, (m, c) in self.ablations.items()]

    def control_of(self, system: str) -> str | None:
        """The matched control of an evaluated system (``<m>_sent`` shares ``m``'s; an ablated
        decoding has none: it is tested against its model)."""
        if system in self.ablations:
            return None
        return self.controls.get(self.systems[system][0])

    @property
    def baseline(self) -> str:
        return self.models[0]

    def system_regex(self) -> str:
        return "|".join(sorted(self.systems, key=len, reverse=True))

    def hypotheses(self) -> list[tuple[str, str, str, str]]:
        """(system, corpus, split, hypothesis Parquet) of every decoded test set."""
        return [(m, c, s, self.results.decode_test(m, c, s).hyps)
                for m in self.systems for c in self.test_corpora for s in self.test_splits]

    def decode_shards(self, system: str, corpus: str, split: str) -> str:
        """The shard folder the decoder reads for one test set (``decode.shard_task``)."""
        return f"{self.results.make_shards(corpus)}/{self.config['decode']['shard_task']}/{split}"

    def test_set_args(self) -> str:
        """``--refs CORPUS DOCS`` and ``--hyp SYSTEM CORPUS SPLIT PARQUET`` flags naming every
        test set, shell-quoted (score and discourse CLIs)."""
        import shlex

        args = [["--refs", c, self.results.ingest_corpus(c).docs]
                for c in self.test_corpora]
        args += [["--hyp", m, c, s, p] for m, c, s, p in self.hypotheses()]
        return " ".join(shlex.quote(a) for flag in args for a in flag)

    @property
    def suites(self) -> dict[str, dict]:
        return dict(self.config["score"]["discourse_suites"])

    @property
    def paper_bleu(self) -> dict | None:
        """The preset's paper figures (the ``bleu`` section of its paper table), for the
        report's paper comparison; None outside a preset or where the table gives none."""
        if not self.config.get("preset"):
            return None
        from pipeline_lib.presets import paper_values
        from pipeline_lib.run_config import PRESET_DIR

        return paper_values(PRESET_DIR, self.config["preset"]).get("bleu")

    def suite_files(self) -> list[str]:
        """Every file the contrastive suites read (rerun triggers)."""
        return [s[k] for s in self.suites.values()
                for k in ("path", "context_src", "context_tgt") if s.get(k)]

    def replica(self, system: str) -> tuple[str, int] | None:
        """(system of the single-seed plan, seed) of an evaluated system of a several-seed run
        (``crosstask_seed2_sent`` -> ``("crosstask_sent", 2)``), else None."""
        job = self.systems[system][0]
        if job not in self.replicas:
            return None
        base, seed = self.replicas[job]
        return (base + system[len(job):], seed)

    def model_code(self, system: str, *entry: str) -> str:
        """Code hash of a stage that runs an evaluated system's model (decoding, contrastive
        scoring): the stage's ``entry`` modules and the model's own module."""
        return code_hash(*entry, f"models.{self.jobs[self.systems[system][0]].model['name']}")
