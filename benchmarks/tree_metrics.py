"""Speed of the lineage metrics against named peers, on random binary trees.

  exact quartet distance (celldag; binary trees      vs  enumerating all C(n,4) quartets with the
  go to the binary O(n^2) algorithm, others to       four-point condition (numpy; what the paper code
  quartet_counts, O(n^2) for small polytomies)        does on distance matrices, O(n^4))
  Robinson-Foulds (celldag)                        vs  DendroPy treecompare.symmetric_difference

  --binary: the O(n^2) binary quartet distance alone at large n (seconds, peak MB), against the
  general algorithm for trees with polytomies (quartet_counts) where that takes under a minute (n <= 1000)

Run: .venv/bin/python benchmarks/tree_metrics.py [n ...]            (default n = 32 64 128)
     .venv/bin/python benchmarks/tree_metrics.py --binary [n ...]   (default n = 1000 2000 5000 10000)
Prints seconds per call and the peer/celldag ratio (> 1: celldag is faster).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from common import measure

from celldag.lineage import metrics
from celldag.lineage.metrics import qdist_sampled, quartet_distance, robinson_foulds
from celldag.lineage.quartets import binary_quartet_distance
from celldag.lineage.tree import parse_newick, path_distances


def random_newick(n: int, rng: np.random.Generator) -> str:
    subtrees = [f"L{i}" for i in range(n)]
    while len(subtrees) > 2:
        i, j = sorted(rng.choice(len(subtrees), size=2, replace=False))
        joined = f"({subtrees[i]},{subtrees[j]})"
        del subtrees[j], subtrees[i]
        subtrees.append(joined)
    return f"({subtrees[0]},{subtrees[1]});"


def seconds(call, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main(sizes: list[int]) -> None:
    import dendropy
    from dendropy.calculate import treecompare

    rng = np.random.default_rng(0)
    print(f"{'n':>5} {'quartet s':>10} {'enumerate s':>12} {'ratio':>7} {'rf s':>9} {'dendropy s':>11} {'ratio':>7}")
    for n in sizes:
        first, second = random_newick(n, rng), random_newick(n, rng)
        a, b = parse_newick(first), parse_newick(second)
        names = list(a.leaf_names)
        dist_a, dist_b = (path_distances(t, names, topology_only=True) for t in (a, b))
        ours = seconds(lambda: quartet_distance(a, b))
        enumerate_all = seconds(lambda: qdist_sampled(dist_a, dist_b, 10**12, rng), repeat=1)
        assert abs(quartet_distance(a, b) - qdist_sampled(dist_a, dist_b, 10**12, rng)) < 1e-12
        taxa = dendropy.TaxonNamespace()
        tree_a = dendropy.Tree.get(data=first, schema="newick", taxon_namespace=taxa, rooting="force-unrooted")
        tree_b = dendropy.Tree.get(data=second, schema="newick", taxon_namespace=taxa, rooting="force-unrooted")
        rf = seconds(lambda: robinson_foulds(a, b))
        peer_rf = seconds(lambda: treecompare.symmetric_difference(tree_a, tree_b))
        print(
            f"{n:>5} {ours:>10.4f} {enumerate_all:>12.4f} {enumerate_all / ours:>7.1f} "
            f"{rf:>9.4f} {peer_rf:>11.4f} {peer_rf / rf:>7.1f}"
        )


def general_quartet_distance(a, b) -> float:
    """metrics.quartet_distance with the dispatch to the binary algorithm switched off."""
    from unittest import mock

    with mock.patch.object(metrics, "is_binary", lambda tree: False):
        return quartet_distance(a, b)


def binary_rows(sizes: list[int], general_up_to: int = 1000) -> None:
    rng = np.random.default_rng(0)
    print(f"{'n':>6} {'binary s':>9} {'peak MB':>8} {'general s':>10} {'ratio':>7}")
    for n in sizes:
        a, b = parse_newick(random_newick(n, rng)), parse_newick(random_newick(n, rng))
        ours, peak = measure(lambda: binary_quartet_distance(a, b), repeat=3 if n <= 2000 else 1)
        general, ratio = "–", "–"
        if n <= general_up_to:
            start = time.perf_counter()
            assert general_quartet_distance(a, b) == binary_quartet_distance(a, b)  # bit for bit
            seconds_general = time.perf_counter() - start
            general, ratio = f"{seconds_general:.2f}", f"{seconds_general / ours:.0f}"
        print(f"{n:>6} {ours:>9.3f} {peak:>8.0f} {general:>10} {ratio:>7}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--binary"]:
        binary_rows([int(arg) for arg in sys.argv[2:]] or [1000, 2000, 5000, 10000])
    else:
        main([int(arg) for arg in sys.argv[1:]] or [32, 64, 128])
