"""Safety rules, checked on the source itself: loading data never runs code, no shell string is built.

- YAML only through ``yaml.safe_load`` or ``yaml.load`` with a safe loader class (no ``unsafe_load`` / full loaders);
- every ``torch.load`` passes ``weights_only=True``;
- ``pickle`` is loaded in exactly one function, the one that re-verifies the file's sha256 first; a model file of
  another tool (CellTypist's) only through an unpickler that allows a list of classes (``ModelUnpickler``);
- no ``os.system`` / ``os.popen`` / ``shell=True``, and no Snakemake ``shell:`` / ``run:`` directive
  into which a registry value could be formatted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO

PYTHON_FILES = sorted(
    [*REPO.glob("src/celldag/**/*.py"), *REPO.glob("workflow/scripts/*.py"), *REPO.glob("benchmarks/*.py")]
)


def calls(path: Path):
    """(dotted name of the callee, call node, enclosing function name) of every call in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    enclosing = {}
    # ast.walk visits outer functions before inner ones, so the innermost function's name wins
    for function in [tree, *[node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]]:
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                enclosing[node] = getattr(function, "name", "<module>")
    for node, function in enclosing.items():
        yield ast.unparse(node.func), node, function


def test_the_scan_sees_the_code():
    assert len(PYTHON_FILES) > 40
    names = {name for path in PYTHON_FILES for name, _, _ in calls(path)}
    assert {"yaml.safe_load", "torch.load", "pickle.load"} <= names


@pytest.mark.parametrize("path", PYTHON_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_code_runs_on_load_and_no_shell(path):
    for name, node, function in calls(path):
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        where = f"{path.relative_to(REPO)}:{node.lineno}"
        assert name not in ("yaml.unsafe_load", "yaml.full_load", "yaml.load_all"), where
        if name == "yaml.load":  # only with a safe loader named in the call itself
            assert ast.unparse(keywords.get("Loader", ast.Constant(None))) in ("yaml.SafeLoader", "yaml.CSafeLoader"), (
                where
            )
        assert name not in ("os.system", "os.popen", "eval", "exec"), where
        if name == "torch.load":
            assert ast.unparse(keywords.get("weights_only", ast.Constant(False))) == "True", where
        if "shell" in keywords:
            assert ast.unparse(keywords["shell"]) == "False", where
        if name in ("pickle.load", "pickle.loads"):
            assert (path.name, function) == ("sources.py", "_read_verified_pickle"), where
        if name in ("pickle.Unpickler", "Unpickler"):
            pytest.fail(f"{where}: a bare Unpickler; subclass it with an allow-list in find_class")


def test_the_model_unpickler_allows_a_list_of_classes_only():
    from celldag.annotation.celltypist import ModelUnpickler

    assert ModelUnpickler.find_class is not __import__("pickle").Unpickler.find_class


def test_rules_run_scripts_only():
    rules = "\n".join(path.read_text() for path in [REPO / "workflow/Snakefile", *REPO.glob("workflow/rules/*.smk")])
    lines = [line.strip() for line in rules.splitlines()]
    assert not [line for line in lines if line.startswith(("shell:", "run:"))]
    assert sum(line.startswith("script:") for line in lines) >= 7


def test_checkpoints_load_with_weights_only(tmp_path):
    """A real checkpoint (model, optimizer, every RNG state) loads under weights_only=True and resumes."""
    from celldag.training import train

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    data = torch.randn(16, 3)

    def step(_):
        optimizer.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        optimizer.step()
        return {"loss": float(loss.detach())}

    common = {
        "model": model,
        "optimizer": optimizer,
        "step_fn": step,
        "checkpoint_dir": tmp_path,
        "checkpoint_every": 2,
        "rng": np.random.default_rng(0),
        "validate_every": 2,
        "validate_fn": lambda: float(model(data).pow(2).mean()),
    }
    train(total_steps=4, **common)
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert saved["step"] == 4 and saved["finished"]
    assert train(total_steps=4, **common).resumed_from == 4
