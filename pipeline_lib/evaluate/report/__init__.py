"""``python -m pipeline_lib.evaluate.report``: the final report, ``index.html`` and ``report.md``,
the one page a researcher reads about a run.

Sections, in order:

0. **Verdict**: the regime (``smoke``: every job trained a fixed budget; ``converged``: every job
   trained to a plateau of its dev metric, stopping.py), then one line per model under the
   stated rule (pipeline_lib/evaluate/decision.py: beats its matched control only where the
   mean Δ BLEU over seeds is positive, the t-test across >= 2 seeds is significant and every
   seed's document-bootstrap interval of Δ lies above 0), with Δ, its intervals and p; the
   data-subset gap (the largest BLEU difference between two systems trained alike that differ
   only in the shards they read: what the data alone moves, not noise); a table of every
   system's updates, target tokens and tokens per update, and why its job stopped.
1. **Run**: git revision(s) and library versions the stages recorded, the hash of the validated
   config (written beside the page as ``config.json``), training and decoding devices, when the
   stages finished, the summed job wall time.
2. **BLEU with 95 % intervals**: a plot (``bleu_intervals.png``) and a table of every system's
   test BLEU with the 95 % interval of sacreBLEU's bootstrap, its difference to the baseline and
   to its matched control, each with the paired-bootstrap p-value (``score_test``); with several
   seeds, each system's mean ± sd over seeds and the tests across seeds.
3. **All metrics**: BLEU, METEOR, d-BLEU, chrF, TER per test set, Δ to the baseline, † where
   significant (METEOR has no significance test: no †), and what METEOR is (NLTK, exact +
   stem, not METEOR 1.5) or why it is not meaningful for the target language.
4. **Context use** (config ``score.context_ablation``): per model, the references' mean
   log-likelihood difference between true and empty context (CXMI) and between true and other
   documents' context, with document-bootstrap intervals, and whether the model uses its
   context under the stated rule (``context_cxmi``, report/context_use.py); then **Discourse**:
   lexical consistency and contrastive suites (``discourse_*``).
5. **Training**: dev loss and dev BLEU against *total* updates (``training_curves.png``): a
   fine-tune is drawn from the update at which the checkpoint it starts from was saved, so a
   two-step recipe reads as one run and a model lines up with its matched control; a table of
   the jobs (initial checkpoint, start, updates, best dev loss, device).
6. **Models**: parameters and their overhead over the baseline, training and decoding speed.
7. **Data**: the funnel of each corpus, records read -> quarantined by reason -> pairs read per
   split -> removed by hygiene by reason (and what it found but kept) -> kept per split ->
   dropped at sharding -> in the training shards (ingest and make_shards manifests).
8. **Wall time per stage**: Snakemake's benchmark file of every job, summed per rule.

Everything shown is read from the files the rule names with flags (``Plan.report_args``),
nothing else: WHY: Snakemake then reruns the report exactly when one of them changes, and every
number on the page traces back to one file. A file a stage did not write, or a field it did not
record, shows as "n/a" rather than failing, so a partial run still gives a readable page. The
same blocks render to Markdown and HTML, so the two files cannot disagree.
"""
