rule evaluate:
    input:
        prepared=prepared_dataset,
        output=paths.RUN_OUTPUT,
    output:
        paths.RUN_SCORES,
    params:
        track=method_track,
        n_quartets=config["evaluation"]["qdist_quartets"],
    log:
        "results/logs/evaluate/{dataset}/{method}/{variant}/seed{seed}.log",
    conda:
        "../../envs/lineage.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    script:
        "../scripts/evaluate.py"
