"""Test-set decoding with each trained model (pipeline_lib.evaluate.decode); the evaluated
systems come from plan.systems (a model decoded with its documents, and cross-task models a
second time sentence by sentence as <model>_sent)."""


rule decode_test:
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
    wildcard_constraints:
        model=plan.system_regex(),
    conda:
        "../../envs/train.yaml"
    threads: 1  # small models: one thread each, several decodes side by side
    resources:
        **plan.gpu_resources(),  # config cluster.gpu_model (the profile asks for the GPU)
    params:
        # the test set's shards inside input.shards, and the search settings
        # (pipeline_lib.plan.options)
        shards=lambda wc: plan.decode_shards(wc.model, wc.corpus, wc.split),
        options=lambda wc: plan.options("decode_test", model=wc.model),
        code=lambda wc: plan.model_code(wc.model, "evaluate.decode"),
    shell:
        "python -m pipeline_lib.evaluate.decode --checkpoint {input.checkpoint:q}"
        " --shards {params.shards:q} --spm {input.spm:q}"
        " --output {output.hyps:q} --manifest {output.manifest:q} --options {params.options:q}"
        " --threads {threads}"
        " > {log:q} 2>&1"
