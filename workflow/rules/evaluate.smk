# One job scores every run on a dataset: scib-metrics compiles (numba, JAX) for about 90 s in every new
# process, while one more embedding costs seconds.
rule evaluate:
    input:
        unpack(evaluation_inputs),
    output:
        paths.DATASET_SCORES,
    params:
        track=dataset_track,
        n_quartets=config["evaluation"]["qdist_quartets"],
        markers=dataset_markers,
    log:
        "results/logs/evaluate/{dataset}.log",
    conda:
        dataset_env
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/evaluate.py"
