rule aggregate:
    input:
        scores=[*PLAN.dataset_scores, *PLAN.chained_scores],
        records=all_run_files(plan.RUN_RECORD) + [run.record for run in PLAN.chained],
    output:
        scores=plan.SCORES,
        runs=plan.RUNS,
        leaderboard=plan.LEADERBOARD,
    params:
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
        notes=config["evaluation"]["notes"],
        tracks=REGISTRIES.tracks,
        kinds=KINDS_OF_ROWS,
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


# results/{name}/index.html (static, opens without a server) and leaderboard.html (for `snakemake --report`)
rule report_html:
    input:
        scores=plan.SCORES,
        runs=plan.RUNS,
        leaderboard=plan.LEADERBOARD,
        figures=PLAN.figure_paths,
    output:
        index=plan.INDEX,
        leaderboard=report(
            plan.LEADERBOARD_HTML,
            caption="../report/leaderboard.rst",
            category="Leaderboard",
            labels={"table": "leaderboard"},
        ),
    params:
        captions=[
            str(REGISTRIES.track(track_id).figure(f).caption_path())
            for _, _, f, track_id in PLAN.figures
        ],
        figure_tracks=[track_id for *_, track_id in PLAN.figures],
        baseline=config["evaluation"]["delta_baseline"],
        paired=config["evaluation"]["paired"],
        notes=config["evaluation"]["notes"],
        tracks=REGISTRIES.tracks,
        kinds=KINDS_OF_ROWS,
    log:
        "results/logs/report_html/{name}.log",
    conda:
        "../../envs/report.yaml"
    localrule: True
    threads: 1
    resources:
        mem_mb=per_attempt(2000),
        runtime=per_attempt(10),
    script:
        "../scripts/report_html.py"
