rule prepare_dataset:
    output:
        paths.PREPARED,
    params:
        entry=dataset_entry,
    log:
        "results/logs/prepare_dataset/{dataset}/seed{seed}.log",
    conda:
        "../../envs/lineage.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    script:
        "../scripts/prepare_dataset.py"
