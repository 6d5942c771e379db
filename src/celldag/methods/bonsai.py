"""Bonsai (de Groot et al., Nature Biotechnology 2026): a Bayesian tree over cells from their raw counts,
through ``bonsai-rs`` (MIT; a clean-room Rust implementation of Sanity + Bonsai, numpy in, tree out).

The expression-only peer of label-free CellTreeQM: no supervision, no training replicate. It reads the
lineage track's optional input ``counts`` — each leaf's scored cells' UMI counts summed — with each
leaf's total over all genes (``count_total``: Sanity needs it when genes were filtered), so datasets
without raw counts record ``not_applicable``. Registry params are bonsai-rs's own defaults, named so
that a run's record says what it ran: Sanity's ``variance_rule``, the search ``start`` and ``search``,
``min_signal_to_noise`` and ``max_amplification`` (null: the library's defaults, 1 and 1000), ``reroot``.
The result is deterministic (the library gives the same tree for any thread count): the seed is unused.
"""

from __future__ import annotations

import numpy as np

from celldag.lineage.track import LineageInput
from celldag.methods import MethodResult


def run(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    import bonsai_rs

    del seed  # deterministic: nothing random in Sanity or the tree search
    result = bonsai_rs.bonsai_from_counts(
        np.ascontiguousarray(inputs.counts),
        cell_totals=np.asarray(inputs.count_total, dtype=np.float64),
        variance_rule=params["variance_rule"],
        start=params["start"],
        search=params["search"],
        min_signal_to_noise=params["min_signal_to_noise"],
        max_amplification=params["max_amplification"],
        reroot=params["reroot"],
    )
    n_leaves = len(inputs.names)
    return MethodResult(
        # the leaves' posterior log-expression over the genes Bonsai kept: what its tree is built on
        embedding=np.asarray(result.node_means[:n_leaves], dtype=np.float64),
        tree_newick=bonsai_rs.to_newick(result.tree, labels=list(inputs.names)),
        uns={
            "bonsai": {
                "loglik": float(result.loglik),
                "genes_kept": int(len(result.features)),
                "genes_dropped": int(len(result.dropped)),
                "search_steps": len(result.steps),
            }
        },
    )


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = ("variance_rule", "start", "search", "min_signal_to_noise", "max_amplification", "reroot")
