"""Lineage metrics against a reference with polytomies (a reconstructed barcode tree, cells as leaves):
the quartet categories of Estabrook, McMorris & Meacham (1985), the resolved-quartet distance and the
split shares, checked against hand counts and an independent enumeration of quartets and splits."""

from __future__ import annotations

import math
from itertools import combinations

import anndata as ad
import numpy as np
import pytest

from celldag.errors import InputError
from celldag.lineage import quartets
from celldag.lineage.metrics import quartet_distance, robinson_foulds, split_compatibility, split_recovery
from celldag.lineage.quartets import is_binary, quartet_counts, resolved_quartets, shared_quartets
from celldag.lineage.scoring import run_scores
from celldag.lineage.track import TRACK, tree_fact
from celldag.lineage.tree import Tree, parse_newick, splits, to_newick

# ---------------------------------------------------------------- an independent count


def split_sets(tree: Tree, order: tuple[str, ...]) -> set[frozenset[str]]:
    """The tree's non-trivial splits, each as the side without order[0] (``tree.splits``)."""
    return {frozenset(name for name, inside in zip(order, row) if inside) for row in splits(tree, order)}


def topology(tree_splits: set[frozenset[str]], quartet: tuple[str, ...]) -> frozenset | None:
    """The quartet's pairing {{a, b}, {c, d}} if a split of the tree puts two of its leaves on each side,
    else None (a star): the definition, with no claim, vertex or four-point arithmetic."""
    for side in tree_splits:
        inside = frozenset(quartet) & side
        if len(inside) == 2:
            return frozenset({inside, frozenset(quartet) - inside})
    return None


def brute_categories(reference: Tree, estimate: Tree) -> dict[str, int]:
    order = reference.leaf_names
    split_r, split_e = split_sets(reference, order), split_sets(estimate, order)
    counts = dict.fromkeys(("agree", "differ", "reference_only", "estimate_only", "star_both"), 0)
    for quartet in combinations(order, 4):
        r, e = topology(split_r, quartet), topology(split_e, quartet)
        if r and e:
            counts["agree" if r == e else "differ"] += 1
        else:
            counts["reference_only" if r else "estimate_only" if e else "star_both"] += 1
    return counts


def categories(reference: Tree, estimate: Tree) -> dict[str, int]:
    counts = quartet_counts(reference, estimate)
    return {
        "agree": counts.agree,
        "differ": counts.differ,
        "reference_only": counts.resolved_a_only,
        "estimate_only": counts.resolved_b - counts.resolved_both,
        "star_both": counts.star_both,
    }


def brute_splits(reference: Tree, estimate: Tree) -> tuple[float, float]:
    """split_recovery and split_compatibility from the split sets: X|X' and Y|Y' are compatible iff one
    of the four intersections is empty."""
    order = reference.leaf_names
    every = frozenset(order)
    split_r, split_e = split_sets(reference, order), split_sets(estimate, order)
    recovery = len(split_r & split_e) / len(split_r) if split_r else math.nan

    def compatible(x: frozenset, y: frozenset) -> bool:
        return not all((x & y, x - y, y - x, every - x - y))

    compatibility = (
        sum(all(compatible(x, y) for y in split_r) for x in split_e) / len(split_e) if split_r and split_e else math.nan
    )
    return recovery, compatibility


def random_tree(n: int, rng: np.random.Generator, collapse: float, unary: float = 0.0) -> Tree:
    """Random binary joins, then each internal edge contracted with probability ``collapse`` (polytomies),
    with unary nodes and roots of degree 2 or more."""
    parts = [f"x{i}" for i in rng.permutation(n)]
    while len(parts) > int(rng.integers(2, 4)):
        i, j = sorted(rng.choice(len(parts), size=2, replace=False))
        right, left = parts.pop(j), parts.pop(i)
        parts.append(f"(({left},{right}))" if rng.random() < unary else f"({left},{right})")
    tree = parse_newick("(" + ",".join(parts) + ");")

    def text(node: int) -> str:
        if tree.is_leaf[node]:
            return tree.names[node]
        kids = []
        for kid in tree.children[node]:
            inner = text(kid)
            contract = not tree.is_leaf[kid] and rng.random() < collapse
            kids.append(inner[1:-1] if contract and inner.startswith("(") and inner.endswith(")") else inner)
        return "(" + ",".join(kids) + ")"

    return parse_newick(text(0) + ";")


# ---------------------------------------------------------------- hand-counted pairs

REFERENCE_5 = "((A,B),C,D,E);"  # one split AB|CDE; ACDE and BCDE are stars
REFERENCE_6 = "((A,B,C),(D,E),F);"  # splits ABC|DEF and DE|ABCF; ABCD, ABCE, ABCF are stars
HAND = [
    # reference, estimate, (agree, differ, reference_only, estimate_only, star_both), split_recovery, compatibility
    # ABCD: AB|CD vs AC|BD and ABCE: AB|CE vs AC|BE differ; ABDE: AB|DE agrees; the estimate resolves both stars
    (REFERENCE_5, "((A,C),B,(D,E));", (1, 2, 0, 2, 0), 0 / 1, 1 / 2),
    # the estimate adds DE|ABC inside the polytomy: everything the reference resolves is recovered
    (REFERENCE_5, "((A,B),C,(D,E));", (3, 0, 0, 2, 0), 1 / 1, 2 / 2),
    # a collapsed estimate (AB|CDEF only): AB|DE, AB|DF, AB|EF agree; the other 9 resolved quartets of
    # the reference are stars in it; ABCD, ABCE, ABCF are resolved only in the estimate
    (REFERENCE_6, "((A,B),C,D,E,F);", (3, 0, 9, 3, 0), 0 / 2, 1 / 1),
    # both with polytomies: BC|DE, BC|DF, BC|EF agree; ABDE, ABDF, ACDE, ACDF, ADEF differ (AD together
    # in the estimate); ABEF, ACEF, BDEF, CDEF are stars in the estimate; the three ABC* stars of the
    # reference are resolved in it
    (REFERENCE_6, "((A,D),(B,C),E,F);", (3, 5, 4, 3, 0), 0 / 2, 1 / 2),
    # the reference's split ABC|DEF only: the 9 quartets with two of ABC and two of DEF agree, the
    # three AF|DE, BF|DE, CF|DE are stars in the estimate
    (REFERENCE_6, "((A,B,C),D,E,F);", (9, 0, 3, 0, 3), 1 / 2, 1 / 1),
    # a 7-leaf star against a caterpillar: nothing is resolved in the reference
    ("(A,B,C,D,E,F,G);", "((((((A,B),C),D),E),F),G);", (0, 0, 0, 35, 0), math.nan, math.nan),
]


@pytest.mark.parametrize(("reference", "estimate", "expected", "recovery", "compatibility"), HAND)
def test_hand_counted_categories(reference, estimate, expected, recovery, compatibility):
    r, e = parse_newick(reference), parse_newick(estimate)
    names = ("agree", "differ", "reference_only", "estimate_only", "star_both")
    assert brute_categories(r, e) == dict(zip(names, expected))
    assert categories(r, e) == dict(zip(names, expected))
    assert np.allclose(brute_splits(r, e), (recovery, compatibility), equal_nan=True)
    assert np.allclose((split_recovery(r, e), split_compatibility(r, e)), (recovery, compatibility), equal_nan=True)


def test_hand_counted_scores():
    counts = quartet_counts(parse_newick(REFERENCE_6), parse_newick("((A,D),(B,C),E,F);"))
    assert counts.resolved_a == 12 and counts.total == 15
    assert counts.resolved_distance == 9 / 12  # 5 resolved the other way + 4 left unresolved, of 12
    assert counts.contradicted == 5 / 12
    assert counts.distance == 12 / 15  # quartet_dist: the 3 stars the estimate resolves count too
    collapsed = quartet_counts(parse_newick(REFERENCE_6), parse_newick("((A,B),C,D,E,F);"))
    assert (collapsed.resolved_distance, collapsed.contradicted) == (9 / 12, 0.0)
    # recovering every resolved quartet and split scores perfectly where RF and quartet_dist cannot
    r, e = parse_newick(REFERENCE_5), parse_newick("((A,B),C,(D,E));")
    assert quartet_counts(r, e).resolved_distance == 0.0 and split_recovery(r, e) == 1.0
    assert robinson_foulds(e, r).normalized == 1 / 3 and quartet_distance(e, r) == 2 / 5


def test_star_reference_gives_nan_not_zero():
    star, estimate = parse_newick("(A,B,C,D,E,F,G);"), parse_newick("((((((A,B),C),D),E),F),G);")
    counts = quartet_counts(star, estimate)
    assert counts.resolved_a == 0  # the reason: the reference resolves no quartet and has no split
    assert math.isnan(counts.resolved_distance) and math.isnan(counts.contradicted)
    assert math.isnan(split_recovery(star, estimate)) and math.isnan(split_compatibility(star, estimate))
    assert math.isnan(split_compatibility(estimate, star))  # an estimate that asserts nothing
    assert counts.distance == 1.0  # quartet_dist: every star of the reference is resolved in the estimate


# ---------------------------------------------------------------- against the enumeration, random trees


def test_random_trees_match_the_enumeration():
    rng = np.random.default_rng(11)
    seen = set()
    for trial in range(150):
        n = int(rng.integers(4, 10))
        r = random_tree(n, rng, collapse=rng.random(), unary=0.2)
        e = random_tree(n, rng, collapse=rng.random() * (trial % 3 > 0), unary=0.2 * (trial % 2))
        expected = brute_categories(r, e)
        assert categories(r, e) == expected, (to_newick(r), to_newick(e))
        assert resolved_quartets(r) == expected["agree"] + expected["differ"] + expected["reference_only"]
        assert np.allclose((split_recovery(r, e), split_compatibility(r, e)), brute_splits(r, e), equal_nan=True)
        seen.add(tuple(expected.values()))
    assert len(seen) > 60


def test_batches_do_not_change_the_counts(monkeypatch):
    # small trees fit one batch; a budget of a few cells splits vertices, edges and branch pairs into many
    rng = np.random.default_rng(12)
    pairs = [(random_tree(9, rng, 0.5, unary=0.2), random_tree(9, rng, 0.4)) for _ in range(10)]
    pairs.append((parse_newick("(A,B,C,D,E,F,(G,H));"), parse_newick("((A,B,C,D,E),F,G,H);")))  # wide vertices
    expected = [categories(r, e) for r, e in pairs]
    monkeypatch.setattr(quartets, "_CELLS", 5)
    assert [categories(r, e) for r, e in pairs] == expected
    assert expected == [brute_categories(r, e) for r, e in pairs]


def test_larger_trees_consistency():
    rng = np.random.default_rng(13)
    for n in (60, 150):
        binary_a, binary_b = random_tree(n, rng, 0.0), random_tree(n, rng, 0.0)
        # binary pairs: the general count equals the binary algorithm's
        assert quartet_counts(binary_a, binary_b).agree == shared_quartets(binary_a, binary_b)
        reference = random_tree(n, rng, 0.6)
        coarse = random_tree(n, rng, 0.8)
        ab, ba = quartet_counts(reference, coarse), quartet_counts(coarse, reference)
        assert (ab.resolved_a, ab.resolved_b) == (ba.resolved_b, ba.resolved_a)
        assert (ab.resolved_both, ab.agree) == (ba.resolved_both, ba.agree)
        assert ab.distance == quartet_distance(coarse, reference)
        # a binary refinement of the reference (its polytomies resolved) contradicts nothing and recovers all
        refined = refine(reference, rng)
        assert is_binary(refined)
        counts = quartet_counts(reference, refined)
        assert counts.differ == 0 and counts.resolved_distance == 0.0 and split_recovery(reference, refined) == 1.0
        assert split_compatibility(reference, refined) == 1.0 and robinson_foulds(refined, reference).normalized > 0


def refine(tree: Tree, rng: np.random.Generator) -> Tree:
    """A binary tree with every split of ``tree``: each polytomy resolved by random joins."""

    def text(node: int) -> str:
        if tree.is_leaf[node]:
            return tree.names[node]
        parts = [text(kid) for kid in tree.children[node]]
        while len(parts) > (3 if node == 0 else 2):
            i, j = sorted(rng.choice(len(parts), size=2, replace=False))
            right, left = parts.pop(j), parts.pop(i)
            parts.append(f"({left},{right})")
        return "(" + ",".join(parts) + ")"

    return parse_newick(text(0) + ";")


def test_binary_reference_agrees_with_quartet_dist():
    # a binary reference resolves every quartet: its resolved distance is quartet_dist for any estimate,
    # and for a binary estimate nothing is unresolved, so contradicted equals it too
    rng = np.random.default_rng(14)
    for n in (7, 12, 80):
        reference = random_tree(n, rng, 0.0, unary=0.1)
        for collapse in (0.0, 0.5):
            estimate = random_tree(n, rng, collapse)
            counts = quartet_counts(reference, estimate)
            assert counts.resolved_a == counts.total
            assert counts.resolved_distance == pytest.approx(quartet_distance(estimate, reference), abs=1e-15)
            if collapse == 0.0:
                assert counts.contradicted == pytest.approx(quartet_distance(estimate, reference), abs=1e-15)
                rf = robinson_foulds(estimate, reference).normalized
                assert split_recovery(reference, estimate) == pytest.approx(1 - rf)


def test_bad_input():
    with pytest.raises(ValueError, match="different leaves"):
        quartet_counts(parse_newick("((A,B),C,D);"), parse_newick("((A,B),C,E);"))
    with pytest.raises(InputError, match="at least 4 leaves"):
        quartet_counts(parse_newick("(A,B,C);"), parse_newick("(A,B,C);"))


# ---------------------------------------------------------------- scoring and the track


def scored(truth: str, estimate: str) -> dict[str, float]:
    names = sorted(parse_newick(truth).leaf_names)
    prepared = ad.AnnData(np.random.default_rng(0).normal(size=(len(names), 3)))
    prepared.obs_names = names
    prepared.uns["tree_newick"] = truth
    output = ad.AnnData(np.zeros((len(names), 0)))
    output.obs_names = names
    output.uns["tree_newick"] = estimate
    return run_scores(prepared, output, seed=0, n_quartets=1000)


def test_run_scores_adds_the_polytomy_metrics():
    scores = scored(REFERENCE_6, "((A,D),(B,C),E,F);")
    assert scores["quartet_dist"] == quartet_distance(parse_newick("((A,D),(B,C),E,F);"), parse_newick(REFERENCE_6))
    assert scores["resolved_quartet_dist"] == 9 / 12 and scores["resolved_quartet_contradicted"] == 5 / 12
    assert scores["split_recovery"] == 0.0 and scores["split_compatibility"] == 0.5
    binary = scored("((A,B),(C,(D,(E,F))));", "((A,C),(B,(D,(E,F))));")  # a binary truth: nothing new
    assert set(binary) == {"rf", "quartet_dist", "qdist_sampled"}
    # a star truth resolves nothing to score: left out, not 0 (qdist_sampled already was, for the same reason)
    star = scored("(A,B,C,D,E,F);", "((A,B),(C,D),(E,F));")
    assert set(star) == {"rf", "quartet_dist", "note"}
    # against a reference with polytomies the leaderboard says what it is and which scores read what it resolves
    assert (
        scores["note"].startswith(
            "The reference tree is with polytomies (up to 3 children), resolving 80.0% of "
            "the quartets: a reconstruction"
        )
        and "resolved_quartet_dist" in scores["note"]
    )
    declared = TRACK.metrics
    for name in ("resolved_quartet_dist", "resolved_quartet_contradicted", "split_recovery", "split_compatibility"):
        assert name in declared and not declared[name].core
    assert declared["split_recovery"].higher_is_better and not declared["resolved_quartet_dist"].higher_is_better


def test_tree_fact():
    assert tree_fact(parse_newick("((A,B),(C,(D,(E,F))));")) == "binary"
    assert tree_fact(parse_newick(REFERENCE_6)) == "with polytomies (up to 3 children), resolving 80.0% of the quartets"
