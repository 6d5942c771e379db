"""Methods that try to read what their task withholds (tests/unit/workflow/test_task_boundary.py)."""

from __future__ import annotations

from celldag.methods import MethodResult


def true_tree(inputs, params, seed):
    """A lineage 'method' that answers with the true tree it is scored against, where it is handed one."""
    if inputs.tree_newick is None:
        raise ValueError("the true tree was withheld")
    return MethodResult(tree_newick=inputs.tree_newick)
