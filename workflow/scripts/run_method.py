from celldag.jobs import joblog
from celldag.jobs.runner import run_method
from celldag.tracks import load_track

track = load_track(snakemake.params.track["definition"])
runs = zip(
    snakemake.params.seeds,
    snakemake.input.prepared,
    snakemake.output.outputs,
    snakemake.output.records,
    snakemake.log,
    strict=True,
)
for seed, prepared, output, record, log in runs:  # the job's seeds in turn, each with its own log
    joblog.start(log)
    run_method(
        prepared_path=prepared,
        gene_table_path=snakemake.input.get("embedding"),
        output_path=output,
        record_path=record,
        dataset_id=snakemake.wildcards.dataset,
        dataset_entry=snakemake.params.dataset,
        method_id=snakemake.wildcards.method,
        method_entry=snakemake.params.method,
        variant=snakemake.wildcards.variant,
        seed=seed,
        track=track,
        threads=snakemake.threads,
        gpu_requested=bool(snakemake.resources.gpu),
        # from the config, not params: where a run trains is no rerun trigger of runs other configurations share
        cpu_fallback=snakemake.config["compute"]["cpu_fallback"],
    )
