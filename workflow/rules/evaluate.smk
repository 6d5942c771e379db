# One job scores every run on a dataset: scib-metrics' JAX kernels compile for ≈ 25 s in a process that finds
# no cache (kept on disk afterwards), imports and neighbour graphs cost ≈ 10 s, one more embedding ≈ 1 s.
rule evaluate:
    input:
        unpack(evaluation_inputs),
    output:
        scores=plan.DATASET_SCORES,
        checksums=plan.checksums_path(plan.DATASET_SCORES),  # per-row digests for celldag audit
    params:
        dataset=dataset_entry,
        track_id=lambda wildcards: REGISTRIES.datasets[wildcards.dataset]["track"],
        track=dataset_track,
        evaluation=config["evaluation"],
    log:
        plan.EVALUATE_LOG,
    benchmark:
        plan.EVALUATE_BENCHMARK
    conda:
        dataset_env
    priority: 10  # the longest single job: start it as soon as its dataset's runs are done
    threads: 1
    resources:
        mem_mb=sized("evaluate", "mem_mb", lambda wildcards, input: len(input.outputs)),
        runtime=sized("evaluate", "runtime", lambda wildcards, input: len(input.outputs)),
    script:
        "../scripts/evaluate.py"
