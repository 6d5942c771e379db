"""Speed of the lineage metrics against named peers, on random binary trees.

  exact quartet distance (celldag, O(n^3 log n))  vs  enumerating all C(n,4) quartets with the
                                                      four-point condition (numpy; what the paper code
                                                      does on distance matrices, O(n^4))
  Robinson-Foulds (celldag)                        vs  DendroPy treecompare.symmetric_difference

Run: .venv/bin/python benchmarks/tree_metrics.py [n ...]   (default n = 32 64 128)
Prints seconds per call and the peer/celldag ratio (> 1: celldag is faster).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from celldag.lineage.metrics import qdist_sampled, quartet_distance, robinson_foulds
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
        print(f"{n:>5} {ours:>10.4f} {enumerate_all:>12.4f} {enumerate_all / ours:>7.1f} "
              f"{rf:>9.4f} {peer_rf:>11.4f} {peer_rf / rf:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or [32, 64, 128])
