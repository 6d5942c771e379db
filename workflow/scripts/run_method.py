import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parents[1] / "src"))  # celldag without installing it (conda envs)
from celldag import joblog  # noqa: E402
from celldag.runner import run_method  # noqa: E402
from celldag.tracks import load_track  # noqa: E402

joblog.start(snakemake.log[0])
run_method(
    prepared_path=snakemake.input.prepared,
    gene_table_path=snakemake.input.get("embedding"),
    output_path=snakemake.output.output,
    record_path=snakemake.output.record,
    dataset_id=snakemake.wildcards.dataset,
    dataset_entry=snakemake.params.dataset,
    method_id=snakemake.wildcards.method,
    method_entry=snakemake.params.method,
    variant=snakemake.wildcards.variant,
    seed=int(snakemake.wildcards.seed),
    track=load_track(snakemake.params.track["definition"]),
    threads=snakemake.threads,
    gpu_requested=bool(snakemake.resources.gpu),
    # from the config, not params: where a run trains is no rerun trigger of runs other configurations share
    cpu_fallback=snakemake.config["compute"]["cpu_fallback"],
)
