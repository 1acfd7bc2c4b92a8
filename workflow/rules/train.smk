"""Every model of `models`, trained by pipeline_lib.training.train (started by
pipeline_lib.training.launch) with the two-step recipes of the papers (config model_settings:
init_from / freeze / data / aux); the jobs come from plan.jobs (pipeline_lib/plan/training.py).
"""

from pipeline_lib.layout import CKPT_BEST, CKPT_FINAL

try:
    TRAIN_SLURM_EXTRA = train_slurm_extra(
        workflow.resource_settings.overwrite_resources
    )
except ValueError as e:
    raise WorkflowError(str(e)) from None


rule train_model:
    input:
        shards=lambda wc: plan.shard_root(
            plan.jobs[wc.model].corpus, plan.jobs[wc.model].data
        ),
        dev_shards=lambda wc: plan.shard_root(
            plan.jobs[wc.model].dev_corpus, plan.jobs[wc.model].data
        ),
        aux_shards=lambda wc: plan.aux_inputs(wc.model),
        # a matched control runs after the job whose updates it copies (its manifest)
        budget=lambda wc: plan.budget_inputs(wc.model),
        spm=plan.results.train_bpe().model,
        # a pre-tokenized run's truecasers, copied into the checkpoints (config tokenize)
        truecasers=[plan.results.train_truecaser(lang).model for lang in plan.truecased],
        init=lambda wc: plan.init_inputs(wc.model),
    output:
        # best initialises later jobs; final is what evaluation reads (the average of the last
        # k checkpoints when train.average_last_k > 1, else best)
        best=directory(plan.checkpoint("{model}", CKPT_BEST)),
        final=directory(plan.checkpoint("{model}", CKPT_FINAL)),
        manifest=plan.results.train_model().manifest,
    log:
        # A link to logs/train_model/{model}.attempts.log, which keeps every attempt's output
        # (see the shell): Snakemake deletes a rule's log before each attempt.
        plan.results.log("train_model"),
    benchmark:
        plan.results.benchmark("train_model")
    wildcard_constraints:
        model=plan.job_regex(),
    # When cores are scarce the longest chain goes first: the baseline, then stanza and parsing
    # (DBSA's data), then jobs that others start from, then the fine-tunes: plan.train_priority.
    priority: lambda wc: plan.train_priority(wc.model)
    # Exit 143 = saved after SIGTERM/SIGUSR1 (pre-emption, time limit): a retry (or SLURM's
    # requeue) resumes from checkpoints/last. A run that finished is never continued: a job
    # Snakemake reruns (--forcerun, new parameters, code or inputs) trains from scratch
    # (pipeline_lib/training/resume.py).
    # Only the Snakemake that submits jobs retries: inside a SLURM job (remote mode) a retry would
    # restart the trainer in the allocation that is about to end (--signal=TERM@120), so the job
    # fails and a new one is submitted.
    # Elsewhere the profile's `retries` (None: Snakemake's --retries, so a job the launcher
    # refuses is submitted 1 + retries times, not more).
    retries: 0 if workflow.remote_exec else None
    conda:
        "../../envs/train.yaml"
    # config cluster.train_threads (64: what Snakemake lowers to --cores); under SLURM the
    # profile's set-threads gives the real CPUs per node (workflow.cores there is the job count).
    # The launcher shares them among the node's processes (OMP_NUM_THREADS).
    threads: plan.train_threads
    # The job's shape comes from config cluster alone (profiles/slurm adds partition, memory,
    # time): `nodes` and `gres` are snakemake-executor-plugin-slurm's sbatch --nodes and --gres,
    # GPUs per node (its `gpu` would be --gpus, a total that the nodes share); "" = no GPU.
    # `attempt` (1, 2, ...) heads each attempt's output in the log and goes into the training
    # manifest's attempts. `require_requeue` (1): under SLURM the launcher refuses to start a job
    # that a pre-emption would end for good (profiles/slurm may set 0; docs/cluster.md).
    # Resources, not params: neither may rerun a finished job.
    resources:
        **plan.train_resources(),
        # --signal=TERM@120 --open-mode=append (pipeline_lib.training.slurm_extra.TRAIN_SBATCH)
        # here, not in the profile, so a command-line --set-resources does not drop them; an own
        # slurm_extra for train_model must keep an early SIGTERM (refused otherwise)
        slurm_extra=TRAIN_SLURM_EXTRA,
        attempt=lambda wc, attempt: attempt,
        require_requeue=1,
        # at its time limit's warning the trainer requeues its own job (a time limit costs no
        # retry) until SLURM has requeued it cluster.max_requeues times
        # (pipeline_lib/training/time_limit.py); the warning tells that SIGTERM from others'
        max_requeues=plan.max_requeues,
        signal_warning_s=signal_warning_s(TRAIN_SLURM_EXTRA),
    params:
        # {"model": model_sizes[size] + registry name + extras, "train": the train section with this
        # job's overrides}; only this job's settings, so editing another model's settings does
        # not rerun it. The trainer takes vocab_size from the BPE model. WHY wildcards only:
        # Snakemake leaves params functions of `input` out of its params rerun trigger.
        cfg=lambda wc: plan.jobs[wc.model].config_json(plan.pretokenize()),
        data=lambda wc: plan.shard_task(plan.jobs[wc.model].data),
        aux=lambda wc: plan.aux_flag(wc.model),
        budget=lambda wc: plan.budget_flag(wc.model),
        out_dir=lambda wc: plan.results.train_dir(wc.model),
        # the launcher's: nodes and GPUs per node (pipeline_lib.plan.options)
        options=plan.options("train_model"),
        code=lambda wc: plan.train_code(wc.model),
    # `exec`: the launcher, then the trainer, replaces this shell, so the SIGTERM that SLURM sends
    # to every process of the job step reaches the trainer alone (a shell would die at once, the
    # in-job Snakemake would report the job dead and end the step mid-save) and Snakemake sees
    # the trainer's exit code after its save. `>>` + the link: the pre-empted attempt's output
    # stays in the log above the resumed one's.
    shell:
        "ln -sfn {wildcards.model}.attempts.log {log:q};"
        " exec python -m pipeline_lib.training.launch --attempt {resources.attempt}"
        " --require-requeue {resources.require_requeue}"
        " --options {params.options:q} --cpus {threads} --"
        " --max-requeues {resources.max_requeues} --signal-warning-s {resources.signal_warning_s}"
        " --config-json {params.cfg:q} --shards {input.shards:q}/{params.data}/train"
        " --dev-shards {input.dev_shards:q}/{params.data}/dev {params.aux} {params.budget}"
        " --spm {input.spm:q}"
        " --out-dir {params.out_dir:q} >> {log:q} 2>&1"
