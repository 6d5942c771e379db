"""The C. elegans embryonic lineage, built from Sulston cell names.

A Sulston name is a founder cell followed by one letter per division (a/p anterior/posterior,
l/r left/right, d/v dorsal/ventral): ``ABplapaaaapp`` is AB, then ten divisions. Writing each
founder as its own divisions from the zygote P0 turns every name into a *path* string (AB = "a",
MS = "paa", ...), and the lineage tree of any set of cells is the trie of their paths, with
distance(u, v) = |u| + |v| − 2·LCP(u, v) divisions. No data file is needed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import numpy as np

from celldag.lineage.tree import Tree

DIVISIONS = "aplrdv"
WILDCARD = "x"  # Packer et al. 2019: any division, for left/right symmetric sublineages ("MSxppap")
# Founders as divisions from P0 (Sulston et al. 1983); Z2/Z3, the germline daughters of P4, as in
# WormAtlas's cell table (Z2 = P4p, Z3 = P4a).
FOUNDER_PATHS = {
    "P0": "",
    "AB": "a",
    "P1": "p",
    "EMS": "pa",
    "MS": "paa",
    "E": "pap",
    "P2": "pp",
    "C": "ppa",
    "P3": "ppp",
    "D": "pppa",
    "P4": "pppp",
    "Z3": "ppppa",
    "Z2": "ppppp",
}
# longest first, so that "EMSa" reads as EMS + a and not as E + "msa"
_FOUNDERS = sorted(FOUNDER_PATHS, key=len, reverse=True)
# for naming internal nodes: the deepest founder on a path names it ("ppaa" is Ca, not P2aa)
_NAMING_FOUNDERS = sorted(FOUNDER_PATHS.items(), key=lambda item: len(item[1]), reverse=True)


def _split(name: str, letters: str) -> tuple[str, str]:
    """(founder path, division letters) of a Sulston name whose divisions are drawn from ``letters``."""
    # WormAtlas puts one space after the founder ("AB plapaaaapp"); some tables upper-case whole
    # names ("ABPLAPAAAAPP"), Packer writes "ABala…": read founder and letters case-insensitively
    text = name.strip()
    for founder in _FOUNDERS:
        if text.upper().startswith(founder):
            rest = text[len(founder) :].removeprefix(" ").lower()
            if all(letter in letters for letter in rest):
                return FOUNDER_PATHS[founder], rest
    raise ValueError(
        f"{name!r} is not an embryonic Sulston name (a founder {'/'.join(FOUNDER_PATHS)} followed by "
        f"divisions from {letters!r}); post-embryonic names such as 'P1.apa' or 'QR.paa' are not supported"
    )


def lineage_path(name: str) -> str:
    """The divisions from P0 to the named embryonic cell: "ABplapaaaapp" → "aplapaaaapp"."""
    founder_path, rest = _split(name, DIVISIONS)
    return founder_path + rest


def lineage_name(path: str) -> str:
    """The Sulston name of a path, after its deepest founder: "apla" → "ABpla", "paa" → "MS"."""
    for founder, founder_path in _NAMING_FOUNDERS:
        if path.startswith(founder_path):
            return founder + path[len(founder_path) :]
    raise AssertionError("unreachable: P0's empty path prefixes every path")


def tree_from_paths(paths: Mapping[str, str]) -> Tree:
    """The lineage tree of the named leaves: root P0, a node wherever paths branch, lengths in divisions.

    Internal nodes are labelled with their lineage name ("ABpla"); the root is P0 even when all leaves
    share a later founder (it is then unary: path distances are unaffected and ``prune`` drops it).
    Raises ValueError when two leaves share a path or one leaf's path is a proper prefix of another's
    (an ancestor observed with its descendant): which one to keep is the caller's choice.
    """
    if not paths:
        raise ValueError("tree_from_paths needs at least one leaf")
    bad = {leaf: path for leaf, path in paths.items() if not re.fullmatch(f"[{DIVISIONS}]*", path)}
    if bad:
        raise ValueError(f"paths must be strings over {DIVISIONS!r}; got {dict(list(bad.items())[:3])}")
    leaf_of: dict[str, str] = {}
    for leaf, path in paths.items():
        if path in leaf_of:
            raise ValueError(f"leaves {leaf_of[path]!r} and {leaf!r} share the lineage path {path!r}")
        leaf_of[path] = leaf
    ordered = sorted(leaf_of)
    # in sorted order a path's descendants follow it directly, and the branch points are exactly the
    # longest common prefixes of neighbours
    branch_points = {""}
    for left, right in zip(ordered, ordered[1:]):
        if right.startswith(left):
            raise ValueError(f"leaf {leaf_of[left]!r} ({left!r}) is an ancestor of leaf {leaf_of[right]!r} ({right!r})")
        branch_points.add(os.path.commonprefix([left, right]))  # character-wise
    # sorting puts every prefix before its extensions, so each node's parent precedes it
    nodes = sorted(branch_points | set(ordered))
    parent, length, names = [], [], []
    ancestors: list[int] = []  # the chain of nodes from the root to the previous node
    for index, path in enumerate(nodes):
        while ancestors and not path.startswith(nodes[ancestors[-1]]):
            ancestors.pop()
        up = ancestors[-1] if ancestors else -1
        parent.append(up)
        length.append(len(path) - len(nodes[up]) if ancestors else np.nan)
        names.append(leaf_of[path] if path in leaf_of else lineage_name(path))
        ancestors.append(index)
    return Tree(np.array(parent, dtype=np.int64), np.array(length, dtype=np.float64), tuple(names))


def expand_pattern(name: str, candidate_paths: Mapping[str, str], include_descendants: bool = True) -> list[str]:
    """The candidate leaves a Packer-style, possibly ambiguous lineage annotation refers to.

    ``name`` holds "/"-separated alternatives ("ABalppppa/ABpraaapa"), each of which may use the
    wildcard "x" for any one division ("MSxppap"). A leaf matches when its path equals an
    alternative or, with ``include_descendants``, lies below it: an annotation that stops at an
    internal node (the cell was only resolved that far) covers every leaf under that node.
    Returns the matching keys of ``candidate_paths`` in their order.
    """
    alternatives = []
    for alternative in name.split("/"):
        founder_path, rest = _split(alternative, DIVISIONS + WILDCARD)
        alternatives.append(re.escape(founder_path) + rest.replace(WILDCARD, f"[{DIVISIONS}]"))
    tail = f"[{DIVISIONS}]*" if include_descendants else ""
    pattern = re.compile(f"(?:{'|'.join(alternatives)}){tail}")  # one compiled pattern for all candidates
    return [leaf for leaf, path in candidate_paths.items() if pattern.fullmatch(path)]
