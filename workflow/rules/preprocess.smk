"""Document Parquet -> sentencepiece ids + subword heads -> restoration noise -> training shards
(pipeline_lib.preprocess: bpe, subword_heads, noise, shards)."""

from pathlib import Path

from pipeline_lib.codehash import code_hash
from pipeline_lib.plan.training import PARSE_PRIORITY


# The papers' segmentation and casing before BPE (config tokenize; none in the default run): a
# truecaser per truecased language, learned from the text BPE learns from
rule train_truecaser:
    input:
        docs=[plan.results.ingest_corpus(c).docs for c in plan.bpe_corpora],
    output:
        **plan.results.train_truecaser(),
    log:
        plan.results.log("train_truecaser"),
    benchmark:
        plan.results.benchmark("train_truecaser")
    priority: 10  # ahead of stanza: see train.smk
    conda:
        "../../envs/preprocess.yaml"
    params:
        options=lambda wc: plan.options("train_truecaser", lang=wc.lang),
        code=code_hash("preprocess.pretokenize"),
    shell:
        "python -m pipeline_lib.preprocess.pretokenize train --options {params.options:q}"
        " --docs {input.docs:q} --out {output.model:q} > {log:q} 2>&1"


rule tokenize_corpus:
    input:
        docs=plan.results.ingest_corpus("{corpus}").docs,
        truecasers=[plan.results.train_truecaser(lang).model for lang in plan.truecased],
    output:
        **plan.results.tokenize_corpus(),
    log:
        plan.results.log("tokenize_corpus"),
    benchmark:
        plan.results.benchmark("tokenize_corpus")
    priority: 10  # ahead of stanza: see train.smk
    conda:
        "../../envs/preprocess.yaml"
    params:
        options=plan.options("tokenize_corpus"),
        truecasers=" ".join(
            f"--truecaser {lang} {plan.results.train_truecaser(lang).model}"
            for lang in plan.truecased
        ),
        code=code_hash("preprocess.pretokenize"),
    shell:
        "python -m pipeline_lib.preprocess.pretokenize apply --options {params.options:q}"
        " --docs {input.docs:q} {params.truecasers} --out-dir $(dirname {output.docs:q})"
        " > {log:q} 2>&1"


# Only corpora with a train or mono split (the text BPE learns from): editing a test-only corpus
# does not retrain BPE, and so every model.
rule train_bpe:
    input:
        docs=[plan.text_docs(c) for c in plan.bpe_corpora],
    output:
        **plan.results.train_bpe(),
    log:
        plan.results.log("train_bpe"),
    benchmark:
        plan.results.benchmark("train_bpe")
    priority: 10  # ahead of stanza (only DBSA's data waits for it): see train.smk
    conda:
        "../../envs/preprocess.yaml"
    threads: 1
    params:
        options=plan.options("train_bpe"),
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    shell:
        "python -m pipeline_lib.preprocess.bpe train --docs {input.docs:q}"
        " --out-dir $(dirname {output.model:q})"
        " --options {params.options:q} --threads {threads} > {log:q} 2>&1"


rule encode_bpe:
    input:
        docs=lambda wc: plan.text_docs(wc.corpus),
        model=plan.results.train_bpe().model,
    output:
        **plan.results.encode_bpe(),
    log:
        plan.results.log("encode_bpe"),
    benchmark:
        plan.results.benchmark("encode_bpe")
    priority: 10  # ahead of stanza (only DBSA's data waits for it): see train.smk
    conda:
        "../../envs/preprocess.yaml"
    threads: 1
    params:
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    shell:
        "python -m pipeline_lib.preprocess.bpe encode --docs {input.docs:q} --model {input.model:q}"
        " --out-dir $(dirname {output.encoded:q}) --threads {threads} > {log:q} 2>&1"


# DBSA's data (model_settings.<job>.data: heads): the same encoding with the parse_corpus heads
# projected onto the pieces, as sentence-pair shards of the parsed pairs only (parse
# .max_sentences_per_split sets the subset; every pair of it is supervised). Kept apart from
# make_shards so that every other model trains while stanza is still training and parsing.
rule encode_heads:
    input:
        docs=lambda wc: plan.text_docs(wc.corpus),
        model=plan.results.train_bpe().model,
        src=plan.results.parse_corpus().src,
        tgt=plan.results.parse_corpus().tgt,
    output:
        **plan.results.encode_heads(),
    log:
        plan.results.log("encode_heads"),
    benchmark:
        plan.results.benchmark("encode_heads")
    priority: PARSE_PRIORITY
    conda:
        "../../envs/preprocess.yaml"
    threads: 1  # beside the training jobs: see train.smk
    params:
        code=code_hash("preprocess.bpe", "preprocess.subword_heads"),
    shell:
        "python -m pipeline_lib.preprocess.bpe encode --docs {input.docs:q} --model {input.model:q}"
        " --parse-src {input.src:q} --parse-tgt {input.tgt:q}"
        " --out-dir $(dirname {output.encoded:q}) --threads {threads} > {log:q} 2>&1"


rule make_head_shards:
    input:
        encoded=plan.results.encode_heads().encoded,
    output:
        shards=directory(plan.results.make_head_shards()),
    log:
        plan.results.log("make_head_shards"),
    benchmark:
        plan.results.benchmark("make_head_shards")
    priority: PARSE_PRIORITY
    conda:
        "../../envs/preprocess.yaml"
    params:
        options=plan.options("make_head_shards"),
        code=code_hash("preprocess.shards"),
    shell:
        "python -m pipeline_lib.preprocess.shards make --encoded {input.encoded:q} --tasks sent"
        " --require-heads"
        " --out-dir {output.shards:q} --options {params.options:q} > {log:q} 2>&1"


rule noise_docs:
    input:
        encoded=plan.results.encode_bpe().encoded,
        model=plan.results.train_bpe().model,
    output:
        **plan.results.noise_docs(),
    log:
        plan.results.log("noise_docs"),
    benchmark:
        plan.results.benchmark("noise_docs")
    priority: 10  # ahead of stanza (only DBSA's data waits for it): see train.smk
    conda:
        "../../envs/preprocess.yaml"
    params:
        options=plan.options("noise_docs"),
        code=code_hash("preprocess.noise"),
    shell:
        "python -m pipeline_lib.preprocess.noise --encoded {input.encoded:q} --model {input.model:q}"
        " --out-dir $(dirname {output.restore:q}) --options {params.options:q} > {log:q} 2>&1"


# The number of shards depends on the data: downstream rules list them through
# checkpoints.make_shards.get(corpus=...) (see verify_shards).
checkpoint make_shards:
    input:
        encoded=plan.results.encode_bpe().encoded,
        restore=plan.results.noise_docs().restore,
    output:
        shards=directory(plan.results.make_shards()),
    log:
        plan.results.log("make_shards"),
    benchmark:
        plan.results.benchmark("make_shards")
    priority: 10
    conda:
        "../../envs/preprocess.yaml"
    params:
        options=plan.options("make_shards"),
        code=code_hash("preprocess.shards", "preprocess.bpe", "preprocess.noise"),
    shell:
        "python -m pipeline_lib.preprocess.shards make --encoded {input.encoded:q}"
        " --restore {input.restore:q} --out-dir {output.shards:q} --options {params.options:q}"
        " > {log:q} 2>&1"


# Every shard and index file make_shards wrote (known once the checkpoint has run).
rule verify_shards:
    input:
        lambda wc: sorted(
            str(p)
            for p in Path(
                checkpoints.make_shards.get(corpus=wc.corpus).output.shards
            ).glob("*/*/*.parquet")
        ),
    output:
        manifest=plan.results.verify_shards().manifest,
    log:
        plan.results.log("verify_shards"),
    benchmark:
        plan.results.benchmark("verify_shards")
    conda:
        "../../envs/preprocess.yaml"
    params:
        root=lambda wc: plan.results.make_shards(wc.corpus),
        code=code_hash("preprocess.shards"),
    shell:
        "python -m pipeline_lib.preprocess.shards verify --shard-dir {params.root:q}"
        " --out {output.manifest:q} > {log:q} 2>&1"
