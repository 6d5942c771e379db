rule aggregate:
    input:
        scores=PLAN.dataset_scores,
        records=all_run_files(plan.RUN_RECORD),
    output:
        scores=plan.SCORES,
        runs=plan.RUNS,
        leaderboard=plan.LEADERBOARD,
    params:
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
        notes=config["evaluation"]["notes"],
        tracks=REGISTRIES.tracks,
    log:
        "results/logs/aggregate/{name}.log",
    conda:
        "../../envs/report.yaml"
    localrule: True
    threads: 1
    resources:
        mem_mb=per_attempt(2000),
        runtime=per_attempt(10),
    script:
        "../scripts/aggregate.py"
