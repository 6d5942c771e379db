rule download_file:
    output:
        plan.DOWNLOAD,
    params:
        file=download_entry,
        pins=download_pins,
    log:
        plan.DOWNLOAD_LOG,
    conda:
        "../../envs/lineage.yaml"
    localrule: True  # compute nodes may have no internet; downloads run where Snakemake runs
    retries: 2
    threads: 1
    resources:
        mem_mb=per_attempt(500),
        runtime=per_attempt(120),
    script:
        "../scripts/download.py"


# `celldag validate` as a job, between a dataset's files and every preparation of them: a lab's file
# written by a rule of its own workflow is checked once it exists (never while the DAG is built), and
# a bad one stops here with its one-line problem, before any seed is prepared or trained.
rule validate_dataset:
    input:
        unpack(dataset_files),
    output:
        plan.VALIDATION,
    params:
        entry=dataset_entry,
    log:
        plan.VALIDATION_LOG,
    conda:
        dataset_env
    threads: 1
    resources:
        mem_mb=per_attempt(8000),
        runtime=per_attempt(30),
    script:
        "../scripts/validate_dataset.py"


rule prepare_dataset:
    input:
        unpack(preparation_inputs),
    output:
        plan.PREPARED,
    params:
        entry=dataset_entry,
        track=dataset_track,
    log:
        plan.PREPARE_LOG,
    benchmark:
        plan.PREPARE_BENCHMARK
    conda:
        dataset_env
    threads: 1
    resources:
        mem_mb=per_attempt(8000),
        runtime=per_attempt(60),
    script:
        "../scripts/prepare_dataset.py"


rule dataset_genes:
    input:
        genes_source,
    output:
        plan.DATASET_GENES,
    log:
        plan.DATASET_GENES_LOG,
    conda:
        dataset_env
    localrule: True  # reads one file's gene names: not worth a cluster submission
    priority: 10  # many training jobs wait on the gene tables
    threads: 1
    resources:
        mem_mb=per_attempt(1000),
        runtime=per_attempt(10),
    script:
        "../scripts/dataset_genes.py"


rule embed_genes:
    input:
        unpack(embedding_inputs),
    output:
        table=plan.GENE_TABLE,
        facts=plan.GENE_TABLE.replace(".parquet", ".json"),
    params:
        entry=embedding_entry,
        dataset_entry=embedding_dataset_entry,
    log:
        plan.GENE_TABLE_LOG,
    conda:
        "../../envs/representation.yaml"
    priority: 10  # many training jobs wait on the gene tables
    # one thread: a 2-thread job waits until two cores are free at once, which on a 2-core machine
    # held the whole sciLaMA chain back by ~220 s; the table is bit-identical with 1 or 2 threads
    threads: 1
    resources:
        mem_mb=per_attempt(8000),
        runtime=per_attempt(60),
    script:
        "../scripts/embed_genes.py"
