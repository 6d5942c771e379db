import numpy as np
import pytest

from celldag.lineage.celegans import DIVISIONS, expand_pattern, lineage_name, lineage_path, tree_from_paths
from celldag.lineage.tree import path_distances, to_newick


@pytest.mark.parametrize(
    "name, path",
    [
        ("ABplapaaaapp", "a" + "plapaaaapp"),
        ("AB plapaaaapp", "a" + "plapaaaapp"),  # WormAtlas spacing
        ("ABPLAPAAAAPP", "a" + "plapaaaapp"),  # upper-cased tables
        ("Ab prppppppa", "a" + "prppppppa"),  # a mistyped founder in WormAtlas's table
        ("MSaaaaapaa", "paa" + "aaaaapaa"),
        ("MS aaaaapaa", "paa" + "aaaaapaa"),
        ("Caappd", "ppa" + "aappd"),
        ("Ealaa", "pap" + "alaa"),
        ("EMSa", "pa" + "a"),  # EMS, not E followed by "msa"
        ("Dap", "pppa" + "ap"),
        ("P0", ""),
        ("AB", "a"),
        ("P4", "pppp"),
        ("Z2", "ppppp"),
        ("Z3", "ppppa"),
    ],
)
def test_lineage_path(name, path):
    assert lineage_path(name) == path


@pytest.mark.parametrize(
    "name",
    ["P1.apa", "QR.paa", "H2L.aa", "V5L.pa", "AB.arppaappa", "Xyz", "MSxppap", "ABalppppa/ABpraaapa", "ABalq", ""],
)
def test_unsupported_names_raise_naming_the_input(name):
    with pytest.raises(ValueError, match=f"'{name}'" if name else "''"):
        lineage_path(name)


@pytest.mark.parametrize("name", ["P0", "AB", "ABpla", "EMS", "MS", "MSaa", "E", "C", "Cap", "D", "P2", "P4", "Z2"])
def test_lineage_name_inverts_lineage_path(name):
    assert lineage_name(lineage_path(name)) == name


def distances(names):
    tree = tree_from_paths({name: lineage_path(name) for name in names})
    return path_distances(tree, names, topology_only=False)


@pytest.mark.parametrize(
    "u, v, divisions",
    [
        ("ABplapaaaapp", "ABplapaaaapa", 2),  # sisters
        ("ABplapaaaapp", "ABplapaaaa", None),  # ancestor: refused below, not a distance
        ("ABal", "ABpr", 4),  # AB → ABa → ABal and AB → ABp → ABpr
        ("MS", "E", 2),  # daughters of EMS
        ("ABplapaaaapp", "MSaaaaapaa", 22),  # 11 + 11 divisions, meeting only at P0
        ("Caappd", "Dap", 10),  # C = P2a, D = P2pa: 1 + 5 divisions below P2, plus 2 + 2
        ("ABalapppa", "ABarapppa", 12),  # they part after ABa: 6 divisions each
    ],
)
def test_hand_checked_path_distances(u, v, divisions):
    if divisions is None:
        with pytest.raises(ValueError, match="ancestor"):
            distances([u, v])
    else:
        np.testing.assert_array_equal(distances([u, v]), [[0, divisions], [divisions, 0]])


def test_tree_structure_and_internal_names():
    tree = tree_from_paths(
        {
            "ADA": lineage_path("ABplapaaaapp"),
            "ADE": lineage_path("ABplapaaaapa"),
            "I3": lineage_path("MSaaaaapaa"),
            "gut": lineage_path("Eal"),
        }
    )
    assert to_newick(tree) == "((ADE:1.0,ADA:1.0)ABplapaaaap:10.0,(I3:9.0,gut:3.0)EMS:2.0)P0;"
    assert tree.leaf_names == ("ADE", "ADA", "I3", "gut")  # paths in sorted order: a < p
    # EMS = "pa" is 2 divisions from P0; I3 ("paa" + 8) and gut ("pap" + 2) are 9 and 3 below it


def test_root_is_p0_even_when_all_leaves_share_a_founder():
    tree = tree_from_paths({"x": lineage_path("ABala"), "y": lineage_path("ABalp")})
    assert tree.names[0] == "P0" and tree.children[0] == (1,)
    assert tree.names[1] == "ABal" and tree.length[1] == 3


def test_path_distances_equal_the_lcp_formula_on_random_paths():
    rng = np.random.default_rng(0)
    for _ in range(20):
        draws = {"".join(rng.choice(list(DIVISIONS), size=rng.integers(0, 9))) for _ in range(40)}
        paths = sorted(p for p in draws if not any(q != p and q.startswith(p) for q in draws))
        leaves = {f"c{i}": path for i, path in enumerate(paths)}
        names = list(rng.permutation(list(leaves)))
        expected = np.array([[_formula(leaves[u], leaves[v]) for v in names] for u in names])
        np.testing.assert_array_equal(path_distances(tree_from_paths(leaves), names, topology_only=False), expected)


def _formula(u: str, v: str) -> int:
    common = next((i for i, (a, b) in enumerate(zip(u, v)) if a != b), min(len(u), len(v)))
    return len(u) + len(v) - 2 * common


def test_single_leaf_trees():
    assert tree_from_paths({"zygote": ""}).names == ("zygote",)
    tree = tree_from_paths({"ABa": "aa"})
    assert tree.names == ("P0", "ABa") and tree.length[1] == 2


def test_ancestor_and_duplicate_paths_raise_naming_both_leaves():
    with pytest.raises(ValueError, match=r"'mother'.*'daughter'"):
        tree_from_paths({"daughter": "apla", "other": "pp", "mother": "apl"})
    with pytest.raises(ValueError, match=r"'one'.*'two'"):
        tree_from_paths({"one": "apl", "two": "apl"})
    with pytest.raises(ValueError, match="paths must be strings"):
        tree_from_paths({"bad": "ABpl"})
    with pytest.raises(ValueError, match="at least one"):
        tree_from_paths({})


CANDIDATES = {
    name: lineage_path(name)
    for name in ["MSappap", "MSpppap", "MSapppp", "MSpppapa", "ABalppppa", "ABpraaapa", "ABpraaapp", "ABalpppp"]
}


def test_expand_pattern_wildcard_matches_any_division():
    assert expand_pattern("MSxppap", CANDIDATES, include_descendants=False) == ["MSappap", "MSpppap"]
    assert expand_pattern("msxppap", CANDIDATES, include_descendants=False) == ["MSappap", "MSpppap"]


def test_expand_pattern_alternatives():
    assert expand_pattern("ABalppppa/ABpraaapa", CANDIDATES) == ["ABalppppa", "ABpraaapa"]
    assert expand_pattern("ABpraaapa/MSxppap", CANDIDATES, include_descendants=False) == [
        "MSappap",
        "MSpppap",
        "ABpraaapa",  # candidate order, not alternative order
    ]


def test_expand_pattern_internal_annotation_covers_the_leaves_below():
    assert expand_pattern("ABpraaap", CANDIDATES) == ["ABpraaapa", "ABpraaapp"]
    assert expand_pattern("MSxppap", CANDIDATES) == ["MSappap", "MSpppap", "MSpppapa"]
    assert expand_pattern("ABpraaap", CANDIDATES, include_descendants=False) == []
    assert expand_pattern("ABalppppaa", CANDIDATES) == []  # below every candidate: matches none


def test_expand_pattern_rejects_bad_alternatives():
    with pytest.raises(ValueError, match="'QR.paa'"):
        expand_pattern("MSxppap/QR.paa", CANDIDATES)
