"""sciLaMA at the paper's sizes on pbmc68k_batched, on CPU: wall time and epochs per phase.

Target (issue 4): one stepwise 3-phase training (hidden 900/400, latent 40, batch 128, early
stopping) in <= 5 minutes on 2 CPU cores. The peer is the paper's own budget: sciLaMA's Table 2 gives
759 s on an A100 for 14,767 pancreas cells; this prints our time and its ratio to that budget.

  .venv/bin/python benchmarks/scilama_cpu.py [embedding table parquet] [threads]

The table defaults to results/embeddings/go_text/pbmc68k_batched-<data_key>.parquet (`make run` writes
it; `snakemake <that path>` makes only it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_A100_SECONDS = 759  # sciLaMA Table 2, pancreas (14,767 cells)
TARGET_SECONDS = 300


def main(table_path: str | None, threads: int) -> None:
    import torch

    from celldag.embeddings import read_table
    from celldag.jobs.prepare import prepare_dataset
    from celldag.methods.scilama import run
    from celldag.plan import GENE_TABLE, data_key, method_params
    from celldag.registry import load_config, read_yaml

    torch.set_num_threads(threads)
    config, registries = load_config(read_yaml(ROOT / "config/presets/paper.yaml"), "paper.yaml", root=ROOT)
    params = method_params(registries.methods["scilama"], "text") | {"device": "cpu"}
    if table_path is None:
        key = data_key(registries.datasets["pbmc68k_batched"])
        table_path = str(ROOT / GENE_TABLE.format(embedding="go_text", dataset="pbmc68k_batched", data_key=key))
    track = registries.track("representation")
    prepared = prepare_dataset("pbmc68k_batched", registries.datasets["pbmc68k_batched"], track, seed=0)
    inputs = track.call("method_input", prepared, None, read_table(table_path, provider="go_text"))
    started = time.perf_counter()
    result = run(inputs, params, seed=0)
    seconds = time.perf_counter() - started
    print(
        f"sciLaMA paper sizes, pbmc68k_batched ({prepared.n_obs} cells × {result.uns['genes']['n_modelled']} genes), "
        f"{threads} thread(s), min_delta {params['min_delta']}"
    )
    for phase, facts in result.uns["training"]["phases"].items():
        print(
            f"  {phase:6s} {facts['epochs']:4d} epochs  {facts['seconds']:7.1f} s  best epoch {facts['best_epoch']}"
            f"  stopped early {facts['stopped_early']}"
        )
    print(
        f"total {seconds:.1f} s = {seconds / TARGET_SECONDS:.2f} × the 300 s target; "
        f"{seconds / PAPER_A100_SECONDS:.2f} × the paper's A100 pancreas time"
    )
    from celldag.embeddings import match_genes
    from celldag.representation.metrics import marker_clustering

    markers = registries.datasets["pbmc68k_batched"]["markers"]
    contextual = marker_clustering(result.gene_embedding, result.gene_ids, markers)
    _, static_vectors, _ = match_genes(list(result.gene_ids), inputs.gene_embedding)
    static = marker_clustering(static_vectors, result.gene_ids, markers)
    print(
        f"marker genes ({contextual['n_genes']}): Davies–Bouldin contextual {contextual['davies_bouldin']:.3f} "
        f"vs static {static['davies_bouldin']:.3f}; Calinski–Harabasz {contextual['calinski_harabasz']:.2f} "
        f"vs {static['calinski_harabasz']:.2f}"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main(sys.argv[1] if len(sys.argv) > 1 else None, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
