"""Document Parquet -> sentencepiece ids + subword heads -> restoration noise -> training shards
(pipeline_lib.preprocess.bpe, pipeline_lib.preprocess.subword_heads, pipeline_lib.preprocess.noise, pipeline_lib.preprocess.shards)."""

BPE = config.get("bpe", {})
NOISE = config.get("noise", {})
SHARDS = config.get("shards", {})


# Input functions are lambdas here (snakemake --lint: no functions beside rules).
# encode_bpe reads the parse_corpus outputs when that rule exists and bpe.use_parses is true;
# otherwise the head columns stay null.
rule train_bpe:
    input:
        docs=expand(f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet", corpus=CORPORA),
    output:
        model=f"{RESULTS}/train_bpe/spm.model",
        vocab=f"{RESULTS}/train_bpe/spm.vocab",
        manifest=f"{RESULTS}/train_bpe/manifest.json",
    log:
        "logs/train_bpe/train_bpe.log",
    params:
        vocab_size=BPE.get("vocab_size", 8000),
        coverage=BPE.get("character_coverage", 1.0),
        sentences=BPE.get("input_sentence_size", 2000000),
        seed=BPE.get("seed", 1234),
        src_lang=config["src_lang"],
        tgt_lang=config["tgt_lang"],
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    threads: 2
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.bpe train --docs {input.docs} --out-dir $(dirname {output.model})"
        " --src-lang {params.src_lang} --tgt-lang {params.tgt_lang}"
        " --vocab-size {params.vocab_size} --character-coverage {params.coverage}"
        " --input-sentence-size {params.sentences} --seed {params.seed}"
        " --threads {threads} > {log} 2>&1"


rule encode_bpe:
    input:
        unpack(
            lambda wildcards: (
                {
                    side: f"{RESULTS}/parse_corpus/{wildcards.corpus}/{side}.parquet"
                    for side in ("src", "tgt")
                }
                if BPE.get("use_parses", True) and workflow.is_rule("parse_corpus")
                else {}
            )
        ),
        docs=f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet",
        model=rules.train_bpe.output.model,
    output:
        encoded=f"{RESULTS}/encode_bpe/{{corpus}}/encoded.parquet",
        quarantine=f"{RESULTS}/encode_bpe/{{corpus}}/quarantine.parquet",
        manifest=f"{RESULTS}/encode_bpe/{{corpus}}/manifest.json",
    log:
        "logs/encode_bpe/{corpus}.log",
    params:
        parse=lambda wildcards, input: " ".join(
            f"--parse-{side} {input[side]}" for side in ("src", "tgt") if side in input.keys()
        ),
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    threads: 2
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.bpe encode --docs {input.docs} --model {input.model}"
        " --out-dir $(dirname {output.encoded}) {params.parse} --threads {threads} > {log} 2>&1"


rule noise_docs:
    input:
        encoded=rules.encode_bpe.output.encoded,
        model=rules.train_bpe.output.model,
    output:
        restore=f"{RESULTS}/noise_docs/{{corpus}}/restore.parquet",
        manifest=f"{RESULTS}/noise_docs/{{corpus}}/manifest.json",
    log:
        "logs/noise_docs/{corpus}.log",
    params:
        gap_ratio=NOISE.get("gap_ratio", 0.2),
        mask_rate=NOISE.get("mask_rate", 0.15),
        mask_token_prob=NOISE.get("mask_token_prob", 0.8),
        random_token_prob=NOISE.get("random_token_prob", 0.1),
        max_sentences=NOISE.get("max_sentences", 30),
        seed=NOISE.get("seed", 1),
        code=code_hash("preprocess.noise"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.noise --encoded {input.encoded} --model {input.model}"
        " --out-dir $(dirname {output.restore}) --gap-ratio {params.gap_ratio}"
        " --mask-rate {params.mask_rate} --mask-token-prob {params.mask_token_prob}"
        " --random-token-prob {params.random_token_prob}"
        " --max-sentences {params.max_sentences} --seed {params.seed} > {log} 2>&1"


# The number of shards depends on the data: downstream rules list them through
# checkpoints.make_shards.get(corpus=...) (see verify_shards).
checkpoint make_shards:
    input:
        encoded=rules.encode_bpe.output.encoded,
        restore=rules.noise_docs.output.restore,
    output:
        shards=directory(f"{RESULTS}/make_shards/{{corpus}}"),
    log:
        "logs/make_shards/{corpus}.log",
    params:
        rows=SHARDS.get("rows_per_shard", 20000),
        row_group=SHARDS.get("row_group_rows", 2000),
        max_len=SHARDS.get("max_len", 250),
        code=code_hash("preprocess.shards", "preprocess.bpe", "preprocess.noise"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.shards make --encoded {input.encoded} --restore {input.restore}"
        " --out-dir {output.shards} --rows-per-shard {params.rows}"
        " --row-group-rows {params.row_group} --max-len {params.max_len} > {log} 2>&1"


# Every shard and index file make_shards wrote (known once the checkpoint has run).
rule verify_shards:
    input:
        lambda wildcards: sorted(
            str(p)
            for p in Path(
                checkpoints.make_shards.get(corpus=wildcards.corpus).output.shards
            ).glob("*/*/*.parquet")
        ),
    output:
        manifest=f"{RESULTS}/verify_shards/{{corpus}}/manifest.json",
    log:
        "logs/verify_shards/{corpus}.log",
    params:
        root=lambda wildcards: f"{RESULTS}/make_shards/{wildcards.corpus}",
        code=code_hash("preprocess.shards"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.shards verify --shard-dir {params.root}"
        " --out {output.manifest} > {log} 2>&1"


FINAL_TARGETS.extend(
    expand(f"{RESULTS}/verify_shards/{{corpus}}/manifest.json", corpus=CORPORA)
)
