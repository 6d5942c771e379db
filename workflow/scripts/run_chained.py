from celldag.jobs import joblog
from celldag.jobs.chained import run_chained
from celldag.tracks import load_track

joblog.start(snakemake.log[0])
run_chained(
    track_id=snakemake.params.track_id,
    track=load_track(snakemake.params.track["definition"]),
    upstream=load_track(snakemake.params.upstream["definition"]),
    dataset_id=snakemake.wildcards.dataset,
    dataset_entry=snakemake.params.dataset,
    methods=snakemake.params.methods,
    seeds=list(snakemake.params.seeds),
    task_paths=list(snakemake.input.prepared),
    upstream_outputs=list(snakemake.input.upstream_outputs),
    upstream_records=list(snakemake.input.upstream_records),
    input_paths=list(snakemake.output.inputs),
    output_paths=list(snakemake.output.outputs),
    record_paths=list(snakemake.output.records),
    threads=snakemake.threads,
)
