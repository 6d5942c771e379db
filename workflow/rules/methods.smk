# One job per dataset × method × variant runs every seed in turn, so that the seconds of process start-up
# and imports (torch, anndata, scikit-bio) are paid once, not once per seed; config compute.job_per_seed
# makes a job per seed, for clusters that run the seeds of a run side by side.
rule run_method:
    input:
        unpack(run_inputs),
    output:
        outputs=plan.job_files(plan.RUN_OUTPUT, config),
        records=plan.job_files(plan.RUN_RECORD, config),
    params:
        dataset=dataset_entry,
        method=method_entry,
        track=method_track,
        seeds=run_seeds,
    log:
        plan.job_files(plan.RUN_LOG, config),
    benchmark:
        plan.run_benchmark(config)
    conda:
        method_env
    threads: 1
    resources:
        mem_mb=trained_sized("mem_mb"),
        runtime=trained_sized("runtime"),
        gpu=method_gpus,
    script:
        "../scripts/run_method.py"
