"""What the run builds: ``rule all``'s targets and the report's inputs (every job by rule, its
benchmark file, every manifest the report reads, as files and as flags). No I/O.
"""

from __future__ import annotations

from pipeline_lib.layout import MANIFEST_FILE


class Targets:
    """Final targets and report inputs (a part of :class:`pipeline_lib.plan.Plan`)."""

    def rule_jobs(self) -> dict[str, list[dict[str, str]]]:
        """Every job of the run but the report's and the local rules' (``download_corpus``,
        ``check_ldc``), as rule -> the wildcards of each of its jobs.

        WHY: the report shows each stage's wall time from the jobs' benchmark files, so rule
        report declares all of them (each rule's own ``benchmark:`` pattern filled with these
        wildcards). The local rules have no benchmark: their time is the network's, and a
        benchmark file is an output, so a corpus placed by hand (what the download error tells
        a user on an offline machine to do) would be fetched again only to write one. This
        mirrors the DAG :meth:`final_targets` asks for; tests/integration/test_workflow.py
        checks it against ``snakemake -n``."""
        corpora = [{"corpus": c} for c in self.corpora]
        heads = [{"corpus": c} for c in self.head_corpora]
        langs = dict.fromkeys(self.side_lang(side) for side in ("src", "tgt"))
        jobs = {
            "ingest_corpus": corpora,
            "stanza_models": [{"lang": lang} for lang in langs] if self.parses else [],
            "parse_shard": [{"corpus": c, "side": side, "shard": str(n)}
                            for c in self.head_corpora for side in ("src", "tgt")
                            for n in range(self.config["parse"]["shards"])],
            "parse_corpus": heads,
            "train_truecaser": [{"lang": lang} for lang in self.truecased],
            "tokenize_corpus": corpora if self.tokenize else [],
            "train_bpe": [{}],
            "encode_bpe": corpora,
            "encode_heads": heads,
            "make_head_shards": heads,
            "noise_docs": corpora,
            "make_shards": corpora,
            "verify_shards": corpora,
            "train_model": [{"model": job} for job in self.jobs],
            "decode_test": [{"model": m, "corpus": c, "split": s}
                            for m, c, s, _ in self.hypotheses()],
            "score_test": [{}],
            "discourse_consistency": [{}],
            "discourse_contrastive": ([{"model": m} for m in self.models]
                                      if self.suites else []),
            "context_cxmi": [{"model": m, "corpus": c, "split": s}
                             for m, c, s in self.cxmi_sets()],
        }
        return {rule: wildcards for rule, wildcards in jobs.items() if wildcards}

    def benchmarks(self) -> list[tuple[str, str]]:
        """(rule, benchmark file) of every job of :meth:`rule_jobs`."""
        return [(rule, self.results.benchmark(rule, **wildcards))
                for rule, jobs in self.rule_jobs().items() for wildcards in jobs]

    def report_inputs(self) -> dict[str, list[str]]:
        """The files the report reads besides the scores (rule report's named inputs;
        :meth:`report_args` names the same files to the report)."""
        r = self.results
        return {
            "ingest": [r.ingest_corpus(c).manifest for c in self.corpora],
            # a shard folder: the manifest inside is not an output of its own
            "shards": [r.make_shards(c) for c in self.corpora],
            "train": [r.train_model(job).manifest for job in self.jobs],
            "decode": [r.decode_test(m, c, s).manifest for m, c, s, _ in self.hypotheses()],
            "cxmi": [r.context_cxmi(m, c, s).cxmi for m, c, s in self.cxmi_sets()],
            "benchmarks": [path for _, path in self.benchmarks()],
        }

    def report_args(self) -> str:
        """The report's flags naming every file it reads besides the scores, shell-quoted:
        which training job each evaluated system is (``--system``), the ingest, shard, training
        and decoding manifests, each training job's parent (the training chains as planned),
        and every job's benchmark file.

        A job's ``metrics.jsonl`` is named but not a declared input: the trainer writes it
        before the job's manifest, and declared as an output Snakemake would delete it before a
        resumed training job (which appends to it)."""
        import shlex

        r = self.results
        args = [["--system", system, job] for system, (job, _) in self.systems.items()]
        args += [["--ingest", c, r.ingest_corpus(c).manifest] for c in self.corpora]
        args += [["--shards", c, f"{r.make_shards(c)}/{MANIFEST_FILE}"] for c in self.corpora]
        args += [["--train", job, r.train_model(job).manifest, r.train_model(job).metrics,
                  self.jobs[job].init_from or ""] for job in self.jobs]
        args += [["--decode", m, r.decode_test(m, c, s).manifest]
                 for m, c, s, _ in self.hypotheses()]
        args += [["--cxmi", m, f"{c}/{s}", r.context_cxmi(m, c, s).cxmi]
                 for m, c, s in self.cxmi_sets()]
        args += [["--benchmark", rule, path] for rule, path in self.benchmarks()]
        return " ".join(shlex.quote(a) for flag in args for a in flag)

    def cxmi_sets(self) -> list[tuple[str, str, str]]:
        """(model, corpus, split) scored with true, random and empty context (config
        score.context_ablation): every model of ``models``, the sentence-level ones as the
        measure's check (0 by construction), on every test set."""
        if not self.config["score"]["context_ablation"]:
            return []
        return [(m, c, s) for m in self.models for c in self.test_corpora
                for s in self.test_splits]

    # --- targets -------------------------------------------------------------------------
    def final_targets(self) -> list[str]:
        """What ``rule all`` builds: every stage's manifest for every corpus and job, and the
        report."""
        r = self.results
        t = [r.ingest_corpus(c).manifest for c in self.corpora]
        t += [r.parse_corpus(c).manifest for c in self.head_corpora]
        t += [r.verify_shards(c).manifest for c in self.corpora]
        t += [r.train_model(m).manifest for m in [*self.models, *self.controls.values()]]
        t += [r.decode_test(m, c, s).manifest for m, c, s, _ in self.hypotheses()]
        t += [r.score_test().scores, r.discourse_consistency().consistency]
        if self.suites:
            t += [r.discourse_contrastive(m).contrastive for m in self.models]
        t += [r.context_cxmi(m, c, s).cxmi for m, c, s in self.cxmi_sets()]
        downloads = self.config["downloads"]
        t += [r.download(d).manifest for d in downloads["corpora"]]
        if downloads["ldc_required"]:
            t.append(r.check_ldc().manifest)
        t.append(r.report().html)
        return t
