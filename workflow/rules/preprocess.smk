"""Document Parquet -> sentencepiece ids + subword heads -> restoration noise -> training shards
(pipeline_lib.preprocess: bpe, subword_heads, noise, shards)."""

import shlex
from pathlib import Path

from pipeline_lib.codehash import code_hash


# Only corpora with a train or mono split (the text BPE learns from): editing a test-only corpus
# does not retrain BPE, and so every model.
rule train_bpe:
    input:
        docs=[plan.out("ingest_corpus", c, "docs.parquet") for c in plan.bpe_corpora],
    output:
        model=plan.out("train_bpe", "spm.model"),
        vocab=plan.out("train_bpe", "spm.vocab"),
        manifest=plan.out("train_bpe", "manifest.json"),
    log:
        "logs/train_bpe/train_bpe.log",
    params:
        vocab_size=config["bpe"]["vocab_size"],
        coverage=config["bpe"]["character_coverage"],
        sentences=config["bpe"]["input_sentence_size"],
        seed=config["bpe"]["seed"],
        src_lang=config["src_lang"],
        tgt_lang=config["tgt_lang"],
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    threads: 2
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.bpe train --docs {input.docs:q}"
        " --out-dir $(dirname {output.model:q})"
        " --src-lang {params.src_lang} --tgt-lang {params.tgt_lang}"
        " --vocab-size {params.vocab_size} --character-coverage {params.coverage}"
        " --input-sentence-size {params.sentences} --seed {params.seed}"
        " --threads {threads} > {log:q} 2>&1"


# encode_bpe projects the parse_corpus heads onto subwords when bpe.use_parses is true;
# otherwise the head columns stay null.
rule encode_bpe:
    input:
        unpack(lambda wc: {side: plan.out("parse_corpus", wc.corpus, f"{side}.parquet")
                           for side in ("src", "tgt")} if plan.parses else {}),
        docs=plan.out("ingest_corpus", "{corpus}", "docs.parquet"),
        model=plan.out("train_bpe", "spm.model"),
    output:
        encoded=plan.out("encode_bpe", "{corpus}", "encoded.parquet"),
        quarantine=plan.out("encode_bpe", "{corpus}", "quarantine.parquet"),
        manifest=plan.out("encode_bpe", "{corpus}", "manifest.json"),
    log:
        "logs/encode_bpe/{corpus}.log",
    params:
        parse=lambda wc, input: " ".join(
            f"--parse-{side} {shlex.quote(input[side])}" for side in ("src", "tgt")
            if side in input.keys()
        ),
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    threads: 2
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.bpe encode --docs {input.docs:q} --model {input.model:q}"
        " --out-dir $(dirname {output.encoded:q}) {params.parse} --threads {threads}"
        " > {log:q} 2>&1"


rule noise_docs:
    input:
        encoded=plan.out("encode_bpe", "{corpus}", "encoded.parquet"),
        model=plan.out("train_bpe", "spm.model"),
    output:
        restore=plan.out("noise_docs", "{corpus}", "restore.parquet"),
        manifest=plan.out("noise_docs", "{corpus}", "manifest.json"),
    log:
        "logs/noise_docs/{corpus}.log",
    params:
        gap_ratio=config["noise"]["gap_ratio"],
        mask_rate=config["noise"]["mask_rate"],
        mask_token_prob=config["noise"]["mask_token_prob"],
        random_token_prob=config["noise"]["random_token_prob"],
        max_sentences=config["noise"]["max_sentences"],
        seed=config["noise"]["seed"],
        code=code_hash("preprocess.noise"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.noise --encoded {input.encoded:q} --model {input.model:q}"
        " --out-dir $(dirname {output.restore:q}) --gap-ratio {params.gap_ratio}"
        " --mask-rate {params.mask_rate} --mask-token-prob {params.mask_token_prob}"
        " --random-token-prob {params.random_token_prob}"
        " --max-sentences {params.max_sentences} --seed {params.seed} > {log:q} 2>&1"


# The number of shards depends on the data: downstream rules list them through
# checkpoints.make_shards.get(corpus=...) (see verify_shards).
checkpoint make_shards:
    input:
        encoded=plan.out("encode_bpe", "{corpus}", "encoded.parquet"),
        restore=plan.out("noise_docs", "{corpus}", "restore.parquet"),
    output:
        shards=directory(plan.out("make_shards", "{corpus}")),
    log:
        "logs/make_shards/{corpus}.log",
    params:
        rows=config["shards"]["rows_per_shard"],
        row_group=config["shards"]["row_group_rows"],
        max_len=config["shards"]["max_len"],
        code=code_hash("preprocess.shards", "preprocess.bpe", "preprocess.noise"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.shards make --encoded {input.encoded:q}"
        " --restore {input.restore:q} --out-dir {output.shards:q} --rows-per-shard {params.rows}"
        " --row-group-rows {params.row_group} --max-len {params.max_len} > {log:q} 2>&1"


# Every shard and index file make_shards wrote (known once the checkpoint has run).
rule verify_shards:
    input:
        lambda wc: sorted(
            str(p)
            for p in Path(checkpoints.make_shards.get(corpus=wc.corpus).output.shards).glob(
                "*/*/*.parquet"
            )
        ),
    output:
        manifest=plan.out("verify_shards", "{corpus}", "manifest.json"),
    log:
        "logs/verify_shards/{corpus}.log",
    params:
        root=lambda wc: plan.out("make_shards", wc.corpus),
        code=code_hash("preprocess.shards"),
    conda:
        "../../envs/preprocess.yaml"
    shell:
        "python -m pipeline_lib.preprocess.shards verify --shard-dir {params.root:q}"
        " --out {output.manifest:q} > {log:q} 2>&1"
