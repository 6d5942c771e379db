"""The ``celldag`` command: ``celldag validate DATASET…`` checks registry datasets without running the pipeline.

Run it in the workflow's directory (paths in the registries are relative to it). Exit status 0 when
every dataset is fine, 1 when a report lists problems, 2 when the config or an id is invalid (the
other named datasets are still checked and reported).
"""

from __future__ import annotations

import argparse
import sys

from celldag.errors import InputError
from celldag.joblog import one_line

DEFAULT_CONFIG = "config/config.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="celldag", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    validate = commands.add_parser("validate", help="check datasets of the registry and print a report")
    validate.add_argument("datasets", nargs="+", metavar="DATASET", help="dataset ids of the registry")
    validate.add_argument("--configfile", default=DEFAULT_CONFIG,
                          help=f"run config naming the registries (default {DEFAULT_CONFIG})")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        return _validate(args.datasets, args.configfile)
    except InputError as err:
        print(one_line(err), file=sys.stderr)
        return 2


def _validate(dataset_ids: list[str], configfile: str) -> int:
    from celldag.registry import load_config, read_yaml
    from celldag.validate import validate_dataset

    _, registries = load_config(read_yaml(configfile), configfile)
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
