"""Test-set decoding with each trained model (pipeline_lib.decode)."""

DECODE = config.get("decode", {})
# `models` (baseline first) comes from the training stage: a list of names or a mapping by name.
DECODE_MODELS = list(config.get("models", ["transformer"]))
DECODE_SPLITS = config.get("score", {}).get("test_splits", ["test"])


rule decode_test:
    input:
        checkpoint=f"{RESULTS}/train_model/{{model}}/checkpoints/best",
        shards=f"{RESULTS}/make_shards/{{corpus}}",
        spm=f"{RESULTS}/train_bpe/spm.model",
    output:
        hyps=f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.parquet",
        manifest=f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.manifest.json",
    log:
        "logs/decode_test/{model}/{corpus}/{split}.log",
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
        code=code_hash("decode", "models", "checkpoint", "batch"),
    threads: 1  # small models: one thread each, several decodes side by side
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m pipeline_lib.decode --checkpoint {input.checkpoint}"
        " --shards {input.shards}/{params.task}/{wildcards.split} --spm {input.spm}"
        " --output {output.hyps} --manifest {output.manifest}"
        " --beam {params.beam} --lenpen {params.lenpen} --max-len-a {params.max_len_a}"
        " --max-len-b {params.max_len_b} --batch-size {params.batch_size} --nbest {params.nbest}"
        " {params.greedy} --mode {params.mode} --threads {threads} > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESULTS}/decode_test/{{model}}/{{corpus}}/{{split}}.manifest.json",
           model=DECODE_MODELS, corpus=CORPORA, split=DECODE_SPLITS)
)
