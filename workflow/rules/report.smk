rule aggregate:
    input:
        scores=PLAN.dataset_scores,
        records=all_run_files(paths.RUN_RECORD),
    output:
        scores=paths.SCORES,
        runs=paths.RUNS,
        leaderboard=paths.LEADERBOARD,
    params:
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
    log:
        "results/logs/aggregate.log",
    conda:
        "../../envs/report.yaml"
    localrule: True
    threads: 1
    resources:
        mem_mb=per_attempt(2000),
        runtime=per_attempt(10),
    script:
        "../scripts/aggregate.py"
