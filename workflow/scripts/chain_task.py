from celldag.jobs import joblog
from celldag.jobs.chained import write_tasks
from celldag.tracks import load_track

joblog.start(snakemake.log[0])
track = load_track(snakemake.params.track["definition"])
write_tasks(
    prepared_paths=list(snakemake.input.prepared),
    task_paths=list(snakemake.output.tasks),
    track_id=snakemake.params.track_id,
    track=track,
    upstream=load_track(snakemake.params.upstream["definition"]),
    task=snakemake.params.task,
)
