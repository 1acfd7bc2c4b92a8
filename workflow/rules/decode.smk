"""Test-set decoding with each trained model (pipeline_lib.evaluate.decode); the evaluated
systems come from plan.systems (a model decoded with its documents, and cross-task models a
second time sentence by sentence as <model>_sent)."""


rule decode_test:
    wildcard_constraints:
        model=plan.system_regex(),
    input:
        checkpoint=lambda wc: plan.checkpoint(plan.systems[wc.model][0]),
        shards=plan.results.make_shards(),
        spm=plan.results.train_bpe().model,
    output:
        **plan.results.decode_test(),
    log:
        plan.results.log("decode_test"),
    benchmark:
        plan.results.benchmark("decode_test")
    params:
        task=config["decode"]["shard_task"],
        beam=config["decode"]["beam"],
        lenpen=config["decode"]["lenpen"],
        max_len_a=config["decode"]["max_len_a"],
        max_len_b=config["decode"]["max_len_b"],
        batch_size=config["decode"]["batch_size"],
        nbest=config["decode"]["nbest"],
        greedy="--greedy" if config["decode"]["greedy"] else "",
        static={None: "auto", True: "on", False: "off"}[config["decode"]["static"]],
        mode=config["decode"]["mode"],
        unit=lambda wc: plan.systems[wc.model][1],
        code=lambda wc: plan.model_code(wc.model, "evaluate.decode"),
    threads: 1  # small models: one thread each, several decodes side by side
    conda:
        "../../envs/train.yaml"
    shell:
        "python -m pipeline_lib.evaluate.decode --checkpoint {input.checkpoint:q}"
        " --shards {input.shards:q}/{params.task}/{wildcards.split} --spm {input.spm:q}"
        " --output {output.hyps:q} --manifest {output.manifest:q}"
        " --beam {params.beam} --lenpen {params.lenpen} --max-len-a {params.max_len_a}"
        " --max-len-b {params.max_len_b} --batch-size {params.batch_size} --nbest {params.nbest}"
        " {params.greedy} --static {params.static} --mode {params.mode} --unit {params.unit}"
        " --threads {threads}"
        " > {log:q} 2>&1"
