"""Test-set decoding with each trained model (pipeline_lib.evaluate.decode)."""

from pipeline_lib.constants import SENT_SUFFIX

DECODE = config.get("decode", {})
# `models` (baseline first): every trained model is decoded (workflow/rules/train.smk).
DECODE_MODELS = list(config.get("models", ["transformer"]))
# Evaluated system -> (trained model, decode unit). A model with model_settings.<m>.sentence_decode
# (cross-task: the paper's "translate sentences" mode) is decoded a second time, each sentence
# alone, and scored as its own row <m>_sent. score.smk and report.smk (included after this file,
# alphabetically) read EVAL_SYSTEMS.
DECODE_SYSTEMS = {m: (m, "document") for m in DECODE_MODELS}
DECODE_SYSTEMS.update(
    {f"{m}{SENT_SUFFIX}": (m, "sentence") for m in DECODE_MODELS
     if config.get("model_settings", {}).get(m, {}).get("sentence_decode", False)}
)
EVAL_SYSTEMS = list(DECODE_SYSTEMS)
DECODE_SPLITS = config.get("score", {}).get("test_splits", ["test"])


rule decode_test:
    wildcard_constraints:
        model="|".join(sorted(EVAL_SYSTEMS, key=len, reverse=True)),
    input:
        checkpoint=lambda wc: f"{RESULTS}/train_model/{DECODE_SYSTEMS[wc.model][0]}/checkpoints/best",
        shards=f"{RESULTS}/make_shards/{{corpus}}",
        spm=f"{RESULTS}/train_bpe/spm.model",
    output:
        hyps=f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.parquet",
        manifest=f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.manifest.json",
    log:
        "logs/decode_test/{model}/{corpus}/{split}.log",
    benchmark:
        "benchmarks/decode_test/{model}/{corpus}/{split}.tsv"
    params:
        task=DECODE.get("shard_task", "doc"),
        beam=DECODE.get("beam", 4),
        lenpen=DECODE.get("lenpen", 0.6),
        max_len_a=DECODE.get("max_len_a", 1.2),
        max_len_b=DECODE.get("max_len_b", 10),
        batch_size=DECODE.get("batch_size", 64),
        nbest=DECODE.get("nbest", 1),
        greedy="--greedy" if DECODE.get("greedy", False) else "",
        mode=DECODE.get("mode", "auto"),
        unit=lambda wc: DECODE_SYSTEMS[wc.model][1],
        # the job's average of its last k checkpoints when train.average_last_k > 1 (written by
        # the same train_model job as best/; TRAIN_SPECS is train.smk's, read at DAG time)
        weights=lambda wc: "averaged"
        if TRAIN_SPECS[DECODE_SYSTEMS[wc.model][0]]["train"].get("average_last_k", 0) > 1
        else "best",
        code=code_hash("evaluate.decode", "models", "training.checkpoint", "batch"),
    threads: 1  # small models: one thread each, several decodes side by side
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m pipeline_lib.evaluate.decode --checkpoint $(dirname {input.checkpoint})/{params.weights}"
        " --shards {input.shards}/{params.task}/{wildcards.split} --spm {input.spm}"
        " --output {output.hyps} --manifest {output.manifest}"
        " --beam {params.beam} --lenpen {params.lenpen} --max-len-a {params.max_len_a}"
        " --max-len-b {params.max_len_b} --batch-size {params.batch_size} --nbest {params.nbest}"
        " {params.greedy} --mode {params.mode} --unit {params.unit} --threads {threads} > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.manifest.json",
           model=EVAL_SYSTEMS, corpus=TEST_CORPORA, split=DECODE_SPLITS)
)
