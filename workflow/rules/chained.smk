# Chained tracks (celldag.tracks.Track.upstream): a track whose methods run on the outputs of another
# track's runs — annotation on every representation run's cell embedding. Per chained track: its task
# per dataset (labels, splits, groups; every seed in one job), one job per upstream run job running all
# its selected methods on that run's output as soon as it exists (nothing is trained twice), one scoring
# job per dataset. Rules per track, since the methods a job runs are its output files.


for _track_id in INPUTS.chained_tracks:
    _methods = INPUTS.chained_methods(_track_id)
    _datasets = [d for d, entry in REGISTRIES.datasets.items() if _track_id in entry["chained"]]

    rule:
        name:
            plan.chained_rule("task", _track_id)
        input:
            prepared=chained_prepared,
        output:
            tasks=[plan.fill(plan.CHAIN_TASK, track=_track_id, seed=seed) for seed in config["seeds"]],
        params:
            track_id=_track_id,
            track=track_entry(_track_id),
            upstream=track_entry(REGISTRIES.track(_track_id).upstream),
            task=lambda wildcards, track_id=_track_id: REGISTRIES.datasets[wildcards.dataset]["chained"][track_id],
        wildcard_constraints:
            dataset=_one_of(_datasets) if _datasets else "(?!)",
        log:
            plan.fill(plan.CHAIN_TASK_LOG, track=_track_id),
        conda:
            dataset_env
        threads: 1
        resources:
            mem_mb=per_attempt(4000),
            runtime=per_attempt(30),
        script:
            "../scripts/chain_task.py"

    rule:
        name:
            plan.chained_rule("run", _track_id)
        input:
            unpack(chained_inputs(_track_id)),
        output:
            inputs=[plan.fill(plan.CHAINED_INPUT, track=_track_id, seed=seed) for seed in config["seeds"]],
            outputs=[plan.fill(plan.CHAINED_OUTPUT, track=_track_id, seed=seed, chained_method=method)
                     for seed in config["seeds"] for method in _methods],
            records=[plan.fill(plan.CHAINED_RECORD, track=_track_id, seed=seed, chained_method=method)
                     for seed in config["seeds"] for method in _methods],
        params:
            track_id=_track_id,
            track=track_entry(_track_id),
            upstream=track_entry(REGISTRIES.track(_track_id).upstream),
            dataset=dataset_entry,
            methods={method: plan.without_citation(REGISTRIES.methods[method]) for method in _methods},
            seeds=config["seeds"],
        wildcard_constraints:
            dataset=_one_of(_datasets) if _datasets else "(?!)",
        log:
            plan.fill(plan.CHAINED_LOG, track=_track_id),
        conda:
            dataset_env
        threads: 1
        resources:
            mem_mb=sized("run_method", "mem_mb", lambda wildcards, input: len(input.prepared), _track_id),
            runtime=sized("run_method", "runtime", lambda wildcards, input: len(input.prepared), _track_id),
        script:
            "../scripts/run_chained.py"

    rule:
        name:
            plan.chained_rule("evaluate", _track_id)
        input:
            unpack(chained_evaluation_inputs(_track_id)),
        output:
            scores=plan.fill(plan.CHAINED_SCORES, track=_track_id),
            checksums=plan.checksums_path(plan.fill(plan.CHAINED_SCORES, track=_track_id)),
        params:
            track_id=_track_id,
            track=track_entry(_track_id),
            dataset=dataset_entry,
            evaluation=config["evaluation"],
        wildcard_constraints:
            dataset=_one_of(_datasets) if _datasets else "(?!)",
        log:
            plan.fill(plan.CHAINED_EVALUATE_LOG, track=_track_id),
        conda:
            dataset_env
        threads: 1
        resources:
            mem_mb=sized("evaluate", "mem_mb", lambda wildcards, input: len(input.outputs), _track_id),
            runtime=sized("evaluate", "runtime", lambda wildcards, input: len(input.outputs), _track_id),
        script:
            "../scripts/evaluate.py"
