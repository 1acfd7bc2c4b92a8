"""Every model of `models`, trained by pipeline_lib.training.train (started by pipeline_lib.training.launch), with the
two-step recipes of the papers (config model_settings: init_from / freeze / data / aux)."""

TRAIN = dict(config.get("train", {}))
TRAIN_CORPUS = TRAIN.pop("corpus", CORPORA[0])
DEV_CORPUS = TRAIN.pop("dev_corpus", None)  # None: each job validates on its training corpus
MODEL_SECTION = config.get("model", {})
CLUSTER = config.get("cluster", {})
MODEL_SETTINGS = config.get("model_settings", {})
TRAIN_MODELS = list(config.get("models", ["transformer"]))

# Training jobs: every evaluated model plus the jobs they start from (init_from), e.g. the
# baseline for DocT/cache/CAMN and crosstask_pretrain for crosstask. A job key is a registry name
# or names one through its settings' `name`.
TRAIN_JOBS = []
_pending = list(TRAIN_MODELS)
while _pending:
    _job = _pending.pop(0)
    if _job not in TRAIN_JOBS:
        TRAIN_JOBS.append(_job)
        if MODEL_SETTINGS.get(_job, {}).get("init_from"):
            _pending.append(MODEL_SETTINGS[_job]["init_from"])

# job -> its settings with every default filled in, so each rule reads one flat record.
TRAIN_SPECS = {}
for _job in TRAIN_JOBS:
    _s = MODEL_SETTINGS.get(_job, {})
    # step 2 starts from step 1's best checkpoint
    _init = f"{RESULTS}/train_model/{_s['init_from']}/checkpoints/best" if _s.get("init_from") else None
    _corpus = _s.get("corpus", TRAIN_CORPUS)
    TRAIN_SPECS[_job] = {
        "model": {
            **config["model_presets"][_s.get("preset", MODEL_SECTION.get("preset", "tiny"))],
            "name": _s.get("name", _job),
            "extras": dict(_s.get("extras", {})),
        },
        "data": _s.get("data", "sent"),
        "corpus": _corpus,
        "dev_corpus": DEV_CORPUS or _corpus,
        "init": [_init] if _init else [],
        "aux": f"--aux-shards {RESULTS}/make_shards/{_corpus}/{_s['aux']}/train"
        if _s.get("aux") else "",
        "train": {
            **TRAIN,
            **_s.get("train", {}),
            "init_from": _init,
            "freeze": list(_s.get("freeze", [])),
            **({"aux_ratio": _s.get("aux_ratio")} if _s.get("aux") else {}),
        },
    }


rule train_model:
    wildcard_constraints:
        model="|".join(sorted(TRAIN_JOBS, key=len, reverse=True)),
    input:
        shards=lambda wc: f"{RESULTS}/make_shards/{TRAIN_SPECS[wc.model]['corpus']}",
        dev_shards=lambda wc: f"{RESULTS}/make_shards/{TRAIN_SPECS[wc.model]['dev_corpus']}",
        spm=f"{RESULTS}/train_bpe/spm.model",
        init=lambda wc: TRAIN_SPECS[wc.model]["init"],
    output:
        best=directory(f"{RESULTS}/train_model/{{model}}/checkpoints/best"),
        manifest=f"{RESULTS}/train_model/{{model}}/manifest.json",
    log:
        "logs/train_model/{model}.log",
    benchmark:
        "benchmarks/train_model/{model}.tsv"
    params:
        # {"model": preset sizes + registry name + extras, "train": the train section with this
        # job's overrides}; only this job's settings, so editing another model's settings does
        # not rerun it. The trainer takes vocab_size from the BPE model. WHY wildcards only:
        # Snakemake leaves params functions of `input` out of its params rerun trigger.
        cfg=lambda wc: json.dumps(
            {"model": TRAIN_SPECS[wc.model]["model"], "train": TRAIN_SPECS[wc.model]["train"]},
            sort_keys=True,
        ),
        data=lambda wc: TRAIN_SPECS[wc.model]["data"],
        aux=lambda wc: TRAIN_SPECS[wc.model]["aux"],
        out_dir=lambda wc: f"{RESULTS}/train_model/{wc.model}",
        nodes=CLUSTER.get("nodes", 1),
        gpus=CLUSTER.get("gpus_per_node", 0),
        code=code_hash("training.train", "training.data", "training.checkpoint", "training.optim", "models", "batch", "evaluate.decode", "training.launch"),
    # A large constant that Snakemake scales down to --cores on a workstation; under SLURM the
    # profile's set-threads gives the real CPUs per job (workflow.cores there is the job count).
    threads: 64
    # Exit 143 = saved after SIGTERM/SIGUSR1 (pre-emption): a retry resumes from checkpoints/last.
    retries: 3
    conda:
        "../../envs/train.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m pipeline_lib.training.launch --nodes {params.nodes}"
        " --gpus-per-node {params.gpus} --"
        " --config-json {params.cfg:q} --shards {input.shards}/{params.data}/train"
        " --dev-shards {input.dev_shards}/{params.data}/dev {params.aux} --spm {input.spm}"
        " --out-dir {params.out_dir} > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESULTS}/train_model/{{model}}/manifest.json", model=TRAIN_MODELS)
)
