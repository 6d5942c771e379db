rule run_method:
    input:
        unpack(run_inputs),
    output:
        output=plan.RUN_OUTPUT,
        record=plan.RUN_RECORD,
    params:
        dataset=dataset_entry,
        method=method_entry,
        track=method_track,
    log:
        "results/logs/run_method/{dataset}/{method}/{variant}/{key}/seed{seed}.log",
    conda:
        method_env
    threads: 1
    resources:
        mem_mb=per_attempt(4000),
        runtime=per_attempt(60),
        gpu=method_gpus,
    script:
        "../scripts/run_method.py"
