from celldag.jobs import joblog
from celldag.jobs.prepare import write_prepared_dataset
from celldag.plan import VALIDATION_INPUT
from celldag.tracks import load_track

joblog.start(snakemake.log[0])
write_prepared_dataset(
    snakemake.wildcards.dataset,
    snakemake.params.entry,
    load_track(snakemake.params.track["definition"]),
    int(snakemake.wildcards.seed),
    snakemake.output[0],
    files={name: path for name, path in snakemake.input.items() if name != VALIDATION_INPUT},
)
