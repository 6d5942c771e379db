"""The ``celldag`` command: ``celldag validate DATASET…`` checks registry datasets without running the pipeline.

Run it in the workflow's directory (paths in the registries are relative to it). Exit status 0 when
every dataset is fine, 1 when a report lists problems, 2 when the config or an id is invalid (the
other named datasets are still checked and reported).

``celldag audit`` checks a finished results directory against itself (docs/audit.md): recorded
checksums, and a seeded sample of runs re-run and re-scored. Exit status 0 when everything matched,
1 when something changed or differs, 2 when the config or an argument is invalid.

``celldag compare A B`` compares two results folders — a rerun on another machine, a release against
the last (docs/compare.md): per score identical, within tolerance, moved, status changed or on one side
only; each leaderboard's order; the run-record fields that differ. Exit status 0 when every score is
identical or within tolerance and no order changed, 1 otherwise, 2 for a bad argument.
``celldag compare --published [RESULTS]`` holds a results folder against the papers' published numbers
(``celldag.results.published``).

``celldag resources`` lists what each benchmarked job (prepare_dataset, run_method, evaluate) used —
wall time and peak RSS from Snakemake's benchmark files — beside the memory it asks of the cluster.

``celldag prefetch`` fills a download mirror (docs/mirror.md) with every file a config's run downloads,
checksums verified, on a machine with internet (a cluster's login node); ``--list`` only lists them. Exit
status 0 when every file is in the mirror, 1 when a download failed (the others are still fetched), 2 when
the config or an argument is invalid.

``celldag cite [RESULTS]`` prints what a paper cites (docs/citing.md): celldag, then the works behind the methods,
datasets and gene embeddings with an ok run in RESULTS and behind the procedures and metrics with an ok score there
(without RESULTS: those the config's plan selects, marked planned), their licenses, and what has no reference;
``--format bibtex`` for BibTeX.
"""

from __future__ import annotations

import argparse
import sys

from celldag import plan as planning
from celldag.bibliography import FORMATS
from celldag.commands.validate import validate_dataset
from celldag.document import markdown
from celldag.errors import InputError
from celldag.jobs.joblog import one_line
from celldag.plan import make_plan
from celldag.registry import DEFAULT_CONFIG, PIN_ON_FIRST_FETCH, load_workflow_config, read_yaml
from celldag.release import version_text


class PrintVersion(argparse.Action):
    """``--version``: argparse's own version action takes its text when the parser is built; this one hashes the
    source and asks git only when the flag is given."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options: what ``main`` parses, and what the docs' commands are checked against."""
    parser = argparse.ArgumentParser(prog="celldag", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=PrintVersion, help="print version, commit and source digest, and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check datasets of the registry and print a report")
    validate.add_argument("datasets", nargs="+", metavar="DATASET", help="dataset ids of the registry")
    validate.add_argument(
        "--configfile", default=DEFAULT_CONFIG, help=f"run config naming the registries (default {DEFAULT_CONFIG})"
    )
    _add_module_options(validate)
    _add_audit(commands)
    _add_compare(commands)
    resources = commands.add_parser(
        "resources",
        help="what each benchmarked job used (wall s, peak RSS) beside what it "
        "asks of the cluster (config/resources.yaml)",
    )
    resources.add_argument("--results", default="results", help="the results directory (default results)")
    _add_module_options(resources)
    _add_prefetch(commands)
    _add_check(commands)
    _add_cite(commands)
    _add_annotate(commands)
    _add_split(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "audit":
            from celldag.commands.audit import audit

            return audit(args.configfile, args.sample, args.seed, args.run, args.workflow, args.config_key)
        if args.command == "compare":
            return _compare(args)
        if args.command == "resources":
            return _resources(args.results, args.workflow)
        if args.command == "check":
            from celldag.commands.check import check

            return check(args.reference, args.results, args.workflow, args.out)
        if args.command == "reference":
            from celldag.commands.check import make_reference

            return make_reference(args.workflow, args.out, args.cores, run=not args.no_run)
        if args.command == "annotate":
            return _annotate(args)
        if args.command == "split":
            return _split(args)
        if args.command == "cite":
            return _cite(args.results, args.output_format, args.configfile, args.workflow, args.config_key)
        if args.command == "prefetch":
            return _prefetch(args.configfile, args.dest, args.list_only, args.workflow, args.config_key)
        return _validate(args.datasets, args.configfile, args.workflow, args.config_key)
    except InputError as err:
        print(one_line(err), file=sys.stderr)
        return 2


def _add_module_options(command) -> None:
    """Where celldag's own registries are, and which section of the config is celldag's, when a lab's
    workflow uses celldag as a module (docs/using-as-a-module.md)."""
    command.add_argument(
        "--workflow",
        default=".",
        metavar="DIR",
        help="the celldag workflow folder whose config/ holds the shipped registries (default: the "
        "current directory; from a lab's outer workflow: a celldag checkout or snakedeploy folder)",
    )
    command.add_argument(
        "--config-key",
        metavar="KEY",
        help="the config section the outer workflow hands to the celldag module (config: config[KEY])",
    )


def _add_audit(commands) -> None:
    audit = commands.add_parser(
        "audit", help="check a finished results directory: checksums, and a sample of runs re-run"
    )
    audit.add_argument(
        "--configfile",
        default=DEFAULT_CONFIG,
        help=f"the run config of the results (default {DEFAULT_CONFIG}; another file overrides it key by key, "
        "as snakemake --configfile does)",
    )
    audit.add_argument(
        "--sample", type=int, default=3, metavar="N", help="how many ok runs to re-run (default 3; 0: none)"
    )
    audit.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sample (default 0)")
    audit.add_argument(
        "--run",
        nargs="+",
        action="extend",
        metavar="DATASET/METHOD/VARIANT/SEED",
        help="re-run these runs instead of a sample",
    )
    _add_module_options(audit)


def _add_compare(commands) -> None:
    compare = commands.add_parser(
        "compare",
        help="one results folder against another: which scores moved, by how "
        "much, and what differs between the runs' environments",
    )
    compare.add_argument(
        "folders",
        nargs="*",
        metavar="FOLDER",
        help="two results folders: results/NAME (with runs/ beside it for the records), a results "
        "folder holding one NAME, or a config name under ./results",
    )
    compare.add_argument(
        "--out",
        metavar="DIR",
        help="where the files go (default results/compare; with --published: the results folder)",
    )
    compare.add_argument(
        "--rtol",
        type=float,
        metavar="R",
        help="relative tolerance of continuous metrics, for every run (default: same bits on CPU, else 1e-4)",
    )
    compare.add_argument(
        "--atol",
        type=float,
        metavar="T",
        help="absolute tolerance of continuous metrics, for every run (default: same bits on CPU, else 1e-6)",
    )
    compare.add_argument("--all", action="store_true", dest="show_all", help="list identical scores too")
    compare.add_argument(
        "--noise",
        metavar="REFERENCE",
        help="judge B against A with this reference's noise model (docs/check.md) instead of bit identity",
    )
    compare.add_argument(
        "--published",
        action="store_true",
        help="compare RESULTS (default: the config's results folder) with the published numbers",
    )
    compare.add_argument("--configfile", help=f"with --published: the run config (default {DEFAULT_CONFIG})")
    _add_module_options(compare)


def _add_prefetch(commands) -> None:
    prefetch = commands.add_parser(
        "prefetch",
        help="fill a download mirror with the files a config's run downloads (for compute nodes without internet)",
    )
    prefetch.add_argument(
        "--configfile",
        default=DEFAULT_CONFIG,
        help=f"the run config (default {DEFAULT_CONFIG}; another file overrides it key by key, "
        "as snakemake --configfile does)",
    )
    prefetch.add_argument(
        "--dest",
        metavar="DIR",
        help="the mirror folder, laid out <DIR>/<host>/<path> (default: the "
        "config's downloads.mirror or $CELLDAG_MIRROR, a folder)",
    )
    prefetch.add_argument(
        "--list",
        action="store_true",
        dest="list_only",
        help="only list the files: URL, sha256 (or pin-on-first-fetch), path in the mirror",
    )
    _add_module_options(prefetch)


def _add_check(commands) -> None:
    check = commands.add_parser(
        "check",
        help="does this installation reproduce the release: the default run's scores "
        "against the shipped reference (docs/check.md)",
    )
    check.add_argument(
        "--reference",
        default="reference/default",
        metavar="DIR",
        help="the reference folder (default reference/default, the release's)",
    )
    check.add_argument(
        "--results",
        default="results/default",
        metavar="DIR",
        help="the results folder to check (default results/default: make run's)",
    )
    check.add_argument("--out", default="results/check", metavar="DIR", help="where check.md and check.html go")
    check.add_argument(
        "--workflow",
        default=".",
        metavar="DIR",
        help="the celldag workflow folder (its config/ and lock file; default: the current directory)",
    )
    reference = commands.add_parser(
        "reference",
        help="make the reference of the default run: the run, more seeds, "
        "perturbed reruns, the noise model (docs/check.md)",
    )
    reference.add_argument(
        "--out", default="reference/default", metavar="DIR", help="where it goes (default reference/default)"
    )
    reference.add_argument("--cores", default="all", help="snakemake --cores of the runs (default all)")
    reference.add_argument("--no-run", action="store_true", help="build from the runs already made, run nothing")
    reference.add_argument("--workflow", default=".", metavar="DIR", help="the celldag workflow folder (default: here)")


def _add_annotate(commands) -> None:
    """Options left out take ``celldag.commands.annotate.Request``'s defaults (not imported here: it loads pandas)."""
    annotate = commands.add_parser(
        "annotate",
        help="annotate a lab's unlabelled cells from a labelled reference: "
        "prediction sets, unknown types, a shift verdict per batch",
    )
    annotate.add_argument(
        "reference",
        metavar="REFERENCE",
        help="the labelled reference: an h5ad (a plain one: cell types in --reference-label-key, "
        "batches in --reference-batch-key; or a prepared dataset, results/data/<dataset>/<key>/"
        "seed<s>.h5ad) or a registry dataset id of the representation track",
    )
    annotate.add_argument(
        "query", metavar="QUERY", help="the lab's h5ad: counts or log-normalised values, batches named"
    )
    annotate.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="the folder written (annotated.h5ad, cells.tsv, batches.tsv, report.md, run.json)",
    )
    annotate.add_argument("--reference-label-key", help="a plain reference's obs column of cell types (default label)")
    annotate.add_argument("--reference-batch-key", help="a plain reference's obs column of batches (default batch)")
    annotate.add_argument("--batch-key", help="the query's obs column of batches (default batch)")
    annotate.add_argument(
        "--label-key",
        help="a query obs column of known labels (empty where unlabelled): those "
        "cells' batches get the labelled shift test",
    )
    annotate.add_argument("--representation", help="representation method of the registry (default pca)")
    annotate.add_argument(
        "--classifier",
        help="annotation classifier of the registry: logistic (default), knn or "
        "celltypist (CellTypist's model on the genes)",
    )
    annotate.add_argument(
        "--model",
        metavar="FILE.pkl|ID",
        help="a trained CellTypist model file as the classifier, or a pretrained model of the registry "
        "(config/models.yaml: downloaded through the mirror and verified); calibrated on the "
        "reference, so it must not have been trained on the reference's cells",
    )
    annotate.add_argument(
        "--probabilities",
        metavar="FILE",
        help="another tool's scores (TSV or CSV: cell ids, one column per reference label) on the "
        "reference's calibration and held-out cells (`celldag split` lists them; the tool "
        "trained on its train cells) and on every query cell, in place of a classifier",
    )
    annotate.add_argument(
        "--label-map",
        metavar="TSV",
        help="with --model: columns model_type and label, the model's types onto the reference's "
        "labels (many to one; default: by name)",
    )
    annotate.add_argument(
        "--procedure",
        help="conformal procedure: label_shift (default), class_conditional, "
        "class_conditional_pooled, split_lac, split_aps or kandinsky_augmented",
    )
    annotate.add_argument(
        "--no-empty-sets",
        action="store_true",
        default=None,
        help="add the top label to an empty set (coverage can only grow; report.md says by how much)",
    )
    annotate.add_argument(
        "--values",
        choices=("auto", "counts", "lognorm"),
        help="what the query's X holds (default auto: counts when every value is an integer)",
    )
    annotate.add_argument("--alpha", type=float, help="miscoverage of the sets (default 0.1)")
    annotate.add_argument(
        "--level", type=float, help="family-wise level of the shift tests over the query's batches (default 0.05)"
    )
    annotate.add_argument(
        "--unknown-level",
        type=float,
        help="the share of known-type cells flagged unknown type at most (default: --alpha)",
    )
    annotate.add_argument("--seed", type=int, help="seed of the split and the methods (default 0)")
    annotate.add_argument("--threads", type=int, help="BLAS and torch threads (default 1)")
    annotate.add_argument(
        "--configfile", default=DEFAULT_CONFIG, help=f"run config naming the registries (default {DEFAULT_CONFIG})"
    )
    _add_module_options(annotate)


ANNOTATE_SETTINGS = (
    "batch_key",
    "label_key",
    "representation",
    "classifier",
    "procedure",
    "values",
    "alpha",
    "level",
    "unknown_level",
    "no_empty_sets",
    "seed",
    "threads",
    "reference_label_key",
    "reference_batch_key",
    "model",
    "label_map",
    "probabilities",
)


def _annotate(args) -> int:
    from celldag.commands.annotate import Request, annotate, model_path, reference_path

    config, registries = load_workflow_config(args.configfile, args.workflow, args.config_key)
    given = {name: getattr(args, name) for name in ANNOTATE_SETTINGS if getattr(args, name) is not None}
    if "model" in given:  # a pretrained model of the registry: its verified download
        given["model"] = model_path(given["model"], registries, config.get("downloads"))
    reference = reference_path(args.reference, registries.datasets, given.get("seed", 0))
    out = annotate(Request(reference=reference, query=args.query, out=args.out, **given), registries.methods)
    print(f"annotated {args.query} into {out} (report.md: the shift verdict per batch)")
    return 0


SPLIT_SETTINGS = ("reference_label_key", "reference_batch_key", "seed")


def _add_split(commands) -> None:
    split = commands.add_parser(
        "split",
        help="the reference's cells and the part each is in (train, calibration, held "
        "out) as `celldag annotate` splits them: what another tool trains on "
        "before its scores come back with --probabilities",
    )
    split.add_argument("reference", metavar="REFERENCE", help="the labelled reference, as for `celldag annotate`")
    split.add_argument("--out", required=True, metavar="FILE.tsv", help="the table written: cell, label, batch, part")
    split.add_argument("--reference-label-key", help="a plain reference's obs column of cell types (default label)")
    split.add_argument("--reference-batch-key", help="a plain reference's obs column of batches (default batch)")
    split.add_argument("--seed", type=int, help="seed of the split (default 0; give annotate the same)")
    split.add_argument(
        "--configfile", default=DEFAULT_CONFIG, help=f"run config naming the registries (default {DEFAULT_CONFIG})"
    )
    _add_module_options(split)


def _split(args) -> int:
    # loaded when the command runs, as in _annotate: celldag.commands.annotate brings pandas and scipy (≈ 0.7 s of
    # import) that every other command would pay for at start-up
    from celldag.commands.annotate import Request, reference_path, split_table

    _, registries = load_workflow_config(args.configfile, args.workflow, args.config_key)
    given = {name: getattr(args, name) for name in SPLIT_SETTINGS if getattr(args, name) is not None}
    reference = reference_path(args.reference, registries.datasets, given.get("seed", 0))
    table = split_table(Request(reference=reference, query="", out="", **given))
    table.to_csv(args.out, sep="\t")
    counts = table["part"].value_counts()
    print(
        f"wrote {args.out}: "
        + ", ".join(f"{counts.get(part, 0):,} {part}" for part in ("train", "calibration", "held out"))
        + " cells"
    )
    return 0


def _add_cite(commands) -> None:
    cite = commands.add_parser(
        "cite",
        help="what a paper made with these results cites: celldag, the works behind the "
        "methods, datasets and gene embeddings with an ok run and the procedures and metrics with an ok score, "
        "their licenses",
    )
    cite.add_argument(
        "results",
        nargs="?",
        metavar="RESULTS",
        help="a results folder (results/NAME); without it, what the config's plan selects, marked planned",
    )
    cite.add_argument(
        "--format",
        choices=FORMATS,
        default="markdown",
        dest="output_format",
        help="markdown: a numbered reference list and the licenses (default); bibtex: BibTeX entries",
    )
    cite.add_argument(
        "--configfile",
        default=DEFAULT_CONFIG,
        help=f"the run config whose registries hold the references (default {DEFAULT_CONFIG})",
    )
    _add_module_options(cite)


def _cite(results: str | None, output_format: str, configfile: str, workflow: str, config_key: str | None) -> int:
    from celldag.commands.cite import citations, cited_by_plan, cited_by_results

    config, registries = load_workflow_config(configfile, workflow, config_key)
    if results is not None:
        cited = cited_by_results(results, registries)
    else:
        try:
            cited = cited_by_plan(make_plan(config, registries), configfile, registries)
        except ValueError as err:  # a config that selects nothing to run
            raise InputError(f"{configfile}: {err}") from err
    print(citations(cited, registries, output_format), end="")
    return 0


def _compare(args) -> int:
    if args.published:
        if len(args.folders) > 1 or args.rtol is not None or args.atol is not None or args.show_all:
            raise InputError(
                "celldag compare --published [RESULTS]: one results folder at most, without --rtol/--atol/--all"
            )
        results = args.folders[0] if args.folders else None  # None: the config's results/{name}
        return compare_published(results, args.configfile or DEFAULT_CONFIG, args.workflow, args.config_key, args.out)
    if len(args.folders) != 2:
        raise InputError(
            f"celldag compare A B: two results folders, got {len(args.folders)} (or --published [RESULTS])"
        )
    if args.configfile or args.config_key:
        raise InputError(
            "celldag compare A B: --configfile and --config-key are for --published (A and B are read as they are)"
        )
    if args.noise:
        if args.rtol is not None or args.atol is not None:
            raise InputError(
                "celldag compare A B --noise REFERENCE: the reference's noise model sets the tolerances "
                "(no --rtol/--atol)"
            )
        from celldag.commands.check import check

        return check(
            args.noise, args.folders[1], args.workflow, args.out or "results/compare", baseline=args.folders[0]
        )
    from celldag.results.compare import DEFAULT_OUT

    return compare_folders(
        *args.folders,
        out=args.out or DEFAULT_OUT,
        rtol=args.rtol,
        atol=args.atol,
        show_all=args.show_all,
        workflow=args.workflow,
    )


def compare_folders(
    a: str,
    b: str,
    out: str,
    rtol: float | None = None,
    atol: float | None = None,
    show_all: bool = False,
    workflow: str = ".",
) -> int:
    """``celldag compare A B``: compare results folders ``a`` and ``b`` (``celldag.results.compare``), write compare.md
    and compare.html to ``out`` (``celldag.report.comparison``) and print a summary; 0 when every score is identical
    or within tolerance and no order changed, else 1."""
    from pathlib import Path

    from celldag.report.comparison import summary_lines, write_comparison
    from celldag.results.compare import compare_sides, declared_tracks, read_side

    sides = (read_side(a), read_side(b))
    comparison = compare_sides(*sides, declared_tracks(workflow, sides), rtol, atol)
    files = write_comparison(comparison, Path(out), show_all)
    print("\n".join(summary_lines(comparison, files)))
    return 1 if comparison.failed else 0


def compare_published(
    results: str | None, configfile: str, workflow: str, config_key: str | None, out: str | None
) -> int:
    """``celldag compare --published``: every published number (``celldag.results.published``) against the scores of
    ``results`` (default results/{name}/ of the config), written to ``out`` (default: that folder) as published.md
    and published.html. 0 when no comparable computed number is ``neither``, 1 when one is; InputError (2) for a
    bad argument."""
    from pathlib import Path

    from celldag import artifacts
    from celldag.report.html import page, render
    from celldag.results.published import (
        DEFAULT_FOLDER,
        NEITHER,
        context_of,
        load_published,
        section,
        summary,
        verdicts,
    )

    config, registries = load_workflow_config(configfile, workflow, config_key)
    folder = Path(workflow) / DEFAULT_FOLDER
    tables = load_published(folder, registries)
    if not tables:
        raise InputError(f"{folder}: no published tables (*.yaml)")
    results = results or str(Path(planning.SCORES.format(name=config["name"])).parent)
    scores_path = Path(results) / "scores.parquet"
    if not scores_path.is_file():
        raise InputError(
            f"{scores_path}: no scores table: run the workflow for this config, or name its results folder"
        )
    try:
        plan = planning.make_plan(config, registries)
    except ValueError as err:  # a config that selects nothing to run
        raise InputError(f"{configfile}: {err}") from err
    found = verdicts(tables, artifacts.read_scores(scores_path), context_of(config, plan, registries))
    blocks = section(f"published vs reproduced: {results}", found, 1)
    out_dir = Path(out or results)
    with artifacts.atomic_path(out_dir / "published.md") as tmp:
        tmp.write_text(markdown(blocks))
    with artifacts.atomic_path(out_dir / "published.html") as tmp:
        tmp.write_text(page("celldag: published vs reproduced", render(blocks)))
    print("\n".join([*summary(found), f"written: {out_dir / 'published.md'}, {out_dir / 'published.html'}"]))
    return 1 if any(verdict.verdict == NEITHER for verdict in found) else 0


def _resources(results: str, workflow: str) -> int:
    import os

    from celldag.jobs.resources import measured

    jobs = measured(results, read_yaml(os.path.join(workflow, "config", "resources.yaml")))
    print("| rule | job | rows | wall s | peak RSS MB | requested MB |\n|---|---|---|---|---|---|")
    for job in jobs:
        peak = f"{job['max_rss_mb']:.0f}" + ("" if job["exact_peak"] else " (sampled)")
        print(
            f"| {job['rule']} | {job['job']} | {job['rows'] or '–'} | {job['wall_s']:.1f} | {peak} | "
            f"{job['requested_mb'] or '–'} |"
        )
    return 0


def _prefetch(configfile: str, dest: str | None, list_only: bool, workflow: str, config_key: str | None) -> int:
    import logging
    from pathlib import Path

    from celldag.artifacts import sha256_file
    from celldag.jobs.download import DownloadError, configured_mirror, download, mirror_path
    from celldag.jobs.prefetch import needed_files

    config, registries = load_workflow_config(configfile, workflow, config_key)
    try:
        plan = make_plan(config, registries)
    except ValueError as err:
        raise InputError(f"{configfile}: {err}") from err
    needed = needed_files(plan, registries)
    if list_only:
        for item in needed:
            print(f"{item.url}\t{item.sha256 or PIN_ON_FIRST_FETCH}\t{mirror_path(item.url)}")
        return 0
    if dest is None:
        mirror = configured_mirror(config["downloads"])
        if mirror is None or mirror.is_url:
            raise InputError(
                "celldag prefetch: --dest DIR names the mirror folder to fill (no downloads.mirror or "
                "$CELLDAG_MIRROR names a local folder)"
            )
        dest = mirror.base
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # download progress on stderr: files run to GBs
    failed = 0
    for item in needed:
        target = Path(dest).expanduser() / mirror_path(item.url)
        try:
            if item.sha256 is None and target.is_file():  # nothing to check it against: keep it, not fetch it again
                digest = sha256_file(target)
            else:  # from the origin, always: this fills the mirror
                digest = download(
                    item.url, target, sha256=item.sha256, progress=logging.getLogger("celldag.jobs.prefetch")
                )
        except DownloadError as err:
            print(one_line(err), file=sys.stderr)
            failed += 1
            continue
        print(f"{digest}  {mirror_path(item.url)}")  # sha256sum's format: `sha256sum -c` in DIR checks the mirror
    return 1 if failed else 0


def _validate(dataset_ids: list[str], configfile: str, workflow: str, config_key: str | None) -> int:
    _, registries = load_workflow_config(configfile, workflow, config_key)
    reports, wrong_ids = [], False
    for dataset_id in dataset_ids:
        try:
            reports.append(validate_dataset(dataset_id, registries))
        except InputError as err:  # a wrong id or registry entry: said now, and the other datasets still checked
            print(one_line(err), file=sys.stderr)
            wrong_ids = True
    if reports:
        print("\n\n".join(report.render() for report in reports))
    if wrong_ids:
        return 2
    return 1 if any(report.problems for report in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
