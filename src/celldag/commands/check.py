"""``celldag check`` and ``celldag reference`` (docs/check.md): does this installation reproduce the release — its
default run held against the reference the release ships — and making that reference.

``check`` judges every score of ``results/default`` against ``reference/default`` bit for bit where nothing that
may change a number differs from the reference's environment, else with the reference's noise model
(``celldag.results.reference``), and prints one verdict, the environment that differs and the cost per rule. Exit 0 when
nothing changed beyond noise, 1 otherwise.

Beside the per-score verdicts, each method is judged as a whole, its seeds and metrics pooled
(``celldag.results.method_verdicts``); a method called changed fails the check as a changed score does.

``reference`` makes the runs (``celldag.commands.reference_runs``), builds the reference from them, and checks the
held-out perturbed reruns against it as a lab's run would be checked, and each perturbed rerun against the reference
built without it; their verdicts go into reference.yaml.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from pathlib import Path

import pandas as pd

from celldag.commands.reference_runs import SEEDS, config_name, make_runs, reference_config, rerun_folder
from celldag.errors import InputError
from celldag.jobs.resources import measured
from celldag.registry import read_yaml
from celldag.release import commit_of, reference_origin
from celldag.report.check import check_blocks, summary_lines, write_check
from celldag.results import method_verdicts
from celldag.results import reference as ref
from celldag.results.compare import Side, declared_tracks, read_side

DEFAULT_REFERENCE = "reference/default"
DEFAULT_RESULTS = "results/default"
DEFAULT_OUT = "results/check"


def measured_jobs(side: Side, workflow: Path) -> list[dict]:
    """The prepare and evaluate jobs Snakemake benchmarked under the side's results folder."""
    return measured(str(side.folder.parent), read_yaml(workflow / "config" / "resources.yaml"))


def judged(reference: ref.Reference, side: Side, workflow: Path, reference_means: pd.DataFrame | None = None):
    """Every score judged, the rule, the environment that differs, the cost ratios and the per-method verdicts
    (``reference_means``: the means a lab's seeds are held against; the reference's over its seeds by default)."""
    here = ref.environment_of(side.records, workflow)
    differences = ref.environment_differences(reference.environment, here)
    rule = ref.rule_for(differences)
    found = ref.judge(reference, side.scores, rule)
    ratios = ref.cost_ratios(reference, ref.cost_table(side, measured_jobs(side, workflow)))
    if reference_means is None:
        reference_means = reference.noise[[*ref.GROUP, "mean", "seeds"]].rename(columns={"seeds": "n"})
    methods = method_verdicts.judge_methods(
        reference.noise,
        reference_means,
        side.scores,
        declared_tracks(str(workflow), (side, side)),
        reference.meta["noise"]["family_false_alarm"],
        reference.regimes,
    )
    return found, rule, differences, ratios, methods


def check(reference_folder: str, results: str, workflow: str, out: str, baseline: str | None = None) -> int:
    """``results`` judged against the reference, or (``baseline``, ``celldag compare A B --noise``) against another
    results folder with the reference's noise model: its scores and environment stand in for the reference's."""
    workflow_path = Path(workflow)
    reference = ref.read(reference_folder)
    side = read_side(results)
    reference_means = None
    if baseline is not None:
        base = read_side(baseline)
        environment = ref.environment_of(base.records, workflow_path)
        reference = replace(
            reference,
            scores=base.scores[[*ref.KEY, "status", "value"]],
            cost=ref.cost_table(base, measured_jobs(base, workflow_path)),
            meta=reference.meta | {"environment": environment},
        )
        reference_means = method_verdicts.means_over_seeds(base.scores)
    found, rule, differences, ratios, methods = judged(reference, side, workflow_path, reference_means)
    blocks = check_blocks(reference, found, rule, differences, ratios, methods, side.folder, Path(reference_folder))
    files = write_check(blocks, Path(out))
    print("\n".join(summary_lines(found, rule, differences, ratios, methods, files) + qc_errors(side.folder)))
    return 0 if ref.reproduces_release(found, methods) else 1


def qc_errors(results: Path) -> list[str]:
    """The errors of the results' quality checks (qc.parquet, ``celldag.results.qc``): runs that failed, one line
    each."""
    path = results / "qc.parquet"
    if not path.is_file():
        return []
    findings = pd.read_parquet(path)
    errors = findings[findings["severity"] == "error"]
    return [
        f"qc error: {row.check} {row.dataset}/{row.method}/{row.variant}: {row.detail}" for row in errors.itertuples()
    ]


def make_reference(workflow: str, out: str, cores: str, run: bool = True) -> int:
    """Make (``run``) or reuse the runs, build the reference into ``out``, and check against it, as a lab's run is
    checked, the held-out reruns — and each perturbed rerun against the reference built without it (leave one
    perturbation out), which tests the noise model on moves it was not built from. Exit 1 when a held-out rerun is
    called changed, per score or per method; the left-out verdicts are recorded and printed."""
    workflow_path = Path(workflow).resolve()
    config = reference_config(workflow_path)
    folders = make_runs(workflow_path, cores) if run else existing_runs(workflow_path, config)
    default = read_side(str(folders["default"]))
    tracks = declared_tracks(str(workflow_path), (default, default))
    seeds = pd.read_parquet(folders[SEEDS] / "scores.parquet")
    reruns = {
        item["name"]: pd.read_parquet(folders[item["name"]] / "scores.parquet") for item in config["perturbations"]
    }
    made = {
        "commit": commit_of(workflow_path),
        "made_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "made_by": "make reference (celldag reference)",
    } | reference_origin(workflow_path)
    measured = measured_jobs(default, workflow_path)

    def built(names: list[str]) -> ref.Reference:
        chosen = {name: reruns[name] for name in names}
        return ref.build(default, seeds, chosen, tracks, config, measured, workflow_path, made)

    def verdict(reference: ref.Reference, name: str) -> dict:
        found, rule, differences, _, methods = judged(reference, read_side(str(folders[name])), workflow_path)
        return {
            "rule": rule,
            "verdict": ref.summary_line(found),
            "methods": method_verdicts.summary_line(methods),
            "environment": [f"{field}: {a} → {b}" for field, (a, b) in differences.items()],
        }

    reference = built(list(reruns))
    held_out = {item["name"]: verdict(reference, item["name"]) for item in config["held_out"]}
    left_out = {}
    if len(reruns) > 1:  # each perturbation judged by the model built from the others
        for name in reruns:
            left_out[name] = {
                key: value
                for key, value in verdict(built([n for n in reruns if n != name]), name).items()
                if key in ("verdict", "methods")
            }
    reference.meta["held_out"] = held_out
    reference.meta["left_out"] = left_out
    ref.write(reference, Path(out))
    print(
        f"reference written to {out}: {len(reference.scores):,} scores, {len(reference.noise):,} score groups "
        f"({reference.noise['kind'].value_counts().to_dict()}), numerical tolerance {reference.tolerance}"
    )
    for role, results in (("held-out rerun", held_out), ("left-out perturbation", left_out)):
        for name, result in results.items():
            print(f"{role} {name}: {result['verdict']}")
            print(f"{role} {name}, per method: {result['methods']}")
    # a left-out perturbation that fails shows a move the others never made (recorded, docs/check.md); the held-out
    # reruns are the reference's test
    return (
        0
        if all(
            result["verdict"].startswith("reproduces") and result["methods"].startswith("0 of")
            for result in held_out.values()
        )
        else 1
    )


def existing_runs(workflow: Path, config: dict) -> dict[str, Path]:
    name = config_name(workflow)
    folders = {"default": workflow / "results" / name}
    for rerun in [SEEDS, *(item["name"] for item in [*config["perturbations"], *config["held_out"]])]:
        folders[rerun] = rerun_folder(workflow, rerun) / "results" / name
    for role, folder in folders.items():
        if not (folder / "scores.parquet").is_file():
            raise InputError(
                f"{folder / 'scores.parquet'}: not found — the {role} run of the reference is not made "
                "(celldag reference without --no-run makes it)"
            )
    return folders
