# One rule per figure a track declares (celldag.tracks.Figure): each has its own caption in
# `snakemake --report`, and each job reads only what its figure needs, so a UMAP grid starts as soon
# as the runs are done while the dataset's scoring job still runs.


for _track_id in REGISTRIES.tracks:
    _datasets = [d for d, entry in REGISTRIES.datasets.items() if _track_id in (entry["track"], *entry["chained"])]
    for _figure in REGISTRIES.track(_track_id).figures:

        rule:
            name:
                plan.figure_rule(_track_id, _figure.name)
            input:
                unpack(figure_inputs(_figure.needs, _track_id)),
            output:
                report(
                    plan.FIGURE.replace("{figure}", _figure.name),
                    caption=str(_figure.caption_path()),
                    category=_track_id,
                    subcategory="{dataset}",
                    labels={"dataset": "{dataset}", "figure": _figure.name},
                ),
            params:
                figure=_figure.name,
                dataset=dataset_entry,
                track_id=_track_id,
                track=track_entry(_track_id),
                seed=PLAN.figure_seed,
                evaluation=config["evaluation"],
                kinds=KINDS_OF_ROWS,
            wildcard_constraints:
                dataset=_one_of(_datasets) if _datasets else "(?!)",
            log:
                plan.fill(plan.FIGURE_LOG, figure=_figure.name),
            conda:
                dataset_env
            threads: 1
            resources:
                mem_mb=per_attempt(4000),
                runtime=per_attempt(20),
            script:
                "../scripts/figure.py"
