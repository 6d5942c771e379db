rule download_file:
    output:
        paths.DOWNLOAD,
    params:
        file=download_entry,
        pins=download_pins,
    log:
        "results/logs/download/{dataset}/{file}.log",
    conda:
        "../../envs/lineage.yaml"
    localrule: True  # compute nodes may have no internet; downloads run where Snakemake runs
    retries: 2
    threads: 1
    resources:
        mem_mb=500,
        runtime=120,
    script:
        "../scripts/download.py"


rule prepare_dataset:
    input:
        unpack(dataset_files),
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
        mem_mb=8000,
        runtime=60,
    script:
        "../scripts/prepare_dataset.py"
