"""Stanza models per language, then dependency parses of both corpus sides in fixed shards
(pipeline_lib.parse.stanza_models, pipeline_lib.parse.dependencies)."""

STANZA = config.get("stanza", {})
PARSE = config.get("parse", {})
PARSE_SHARDS = list(range(PARSE.get("shards", 2)))
SIDE_LANG = {"src": config["src_lang"], "tgt": config["tgt_lang"]}


wildcard_constraints:
    side="src|tgt",
    shard=r"\d+",


rule stanza_models:
    output:
        model=f"{RESULTS}/stanza_models/{{lang}}/model.json",
        manifest=f"{RESULTS}/stanza_models/{{lang}}/manifest.json",
    log:
        "logs/stanza_models/{lang}.log",
    params:
        spec=json.dumps(STANZA, sort_keys=True),
        shared=SHARED,
        store=f"{RESOURCES}/stanza",
        code=code_hash("parse.stanza_models"),
    # one thread per language: both languages train side by side on 2 cores
    threads: 1
    conda:
        "../../envs/parse.yaml"
    shell:
        "python -m pipeline_lib.parse.stanza_models --lang {wildcards.lang} --spec {params.spec:q}"
        " --shared-dir {params.shared} --resources-dir {params.store}"
        " --out-dir $(dirname {output.model}) --threads {threads} > {log} 2>&1"


rule parse_shard:
    input:
        docs=f"{RESULTS}/ingest_corpus/{{corpus}}/docs.parquet",
        model=lambda wc: f"{RESULTS}/stanza_models/{SIDE_LANG[wc.side]}/model.json",
    output:
        parse=f"{RESULTS}/parse_shard/{{corpus}}/{{side}}/{{shard}}/parse.parquet",
        quarantine=f"{RESULTS}/parse_shard/{{corpus}}/{{side}}/{{shard}}/quarantine.parquet",
        manifest=f"{RESULTS}/parse_shard/{{corpus}}/{{side}}/{{shard}}/manifest.json",
    log:
        "logs/parse_shard/{corpus}/{side}.{shard}.log",
    params:
        splits=" ".join(PARSE.get("splits", ["train", "dev"])),
        cap=PARSE.get("max_sentences_per_split") or 0,
        num_shards=len(PARSE_SHARDS),
        max_words=PARSE.get("max_words", 200),
        batch_size=PARSE.get("batch_size", 256),
        code=code_hash("parse.dependencies", "parse.stanza_models"),
    threads: PARSE.get("threads", 1)
    conda:
        "../../envs/parse.yaml"
    shell:
        "python -m pipeline_lib.parse.dependencies shard --docs {input.docs} --side {wildcards.side}"
        " --model {input.model} --shard {wildcards.shard} --num-shards {params.num_shards}"
        " --splits {params.splits} --max-sentences-per-split {params.cap}"
        " --max-words {params.max_words} --batch-size {params.batch_size} --threads {threads}"
        " --out-dir $(dirname {output.parse}) > {log} 2>&1"


rule parse_corpus:
    input:
        # each shard's manifest.json; its parse.parquet and quarantine.parquet lie beside it
        src=lambda wc: expand(f"{RESULTS}/parse_shard/{wc.corpus}/src/{{s}}/manifest.json", s=PARSE_SHARDS),
        tgt=lambda wc: expand(f"{RESULTS}/parse_shard/{wc.corpus}/tgt/{{s}}/manifest.json", s=PARSE_SHARDS),
    output:
        src=f"{RESULTS}/parse_corpus/{{corpus}}/src.parquet",
        tgt=f"{RESULTS}/parse_corpus/{{corpus}}/tgt.parquet",
        quarantine=f"{RESULTS}/parse_corpus/{{corpus}}/quarantine.parquet",
        manifest=f"{RESULTS}/parse_corpus/{{corpus}}/manifest.json",
    log:
        "logs/parse_corpus/{corpus}.log",
    params:
        src=lambda wc, input: " ".join(os.path.dirname(p) for p in input.src),
        tgt=lambda wc, input: " ".join(os.path.dirname(p) for p in input.tgt),
        code=code_hash("parse.dependencies", "parse.stanza_models"),
    conda:
        "../../envs/parse.yaml"
    shell:
        "python -m pipeline_lib.parse.dependencies merge --src-shards {params.src} --tgt-shards {params.tgt}"
        " --out-dir $(dirname {output.src}) > {log} 2>&1"


# Parses feed the subword heads (DBSA); setups without them (bpe.use_parses: false) skip stanza.
if config.get("bpe", {}).get("use_parses", True):
    FINAL_TARGETS.extend(
        expand(f"{RESULTS}/parse_corpus/{{corpus}}/manifest.json", corpus=CORPORA)
    )
