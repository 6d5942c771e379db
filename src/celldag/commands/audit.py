"""``celldag audit``: check a finished results directory against itself (docs/audit.md).

Two checks, run in the workflow directory (the records' paths are relative to it):

* checksums — every file a run record of the configuration names (its inputs, its output, the
  prepared dataset's source files) still has the recorded sha256, and every scores table still has
  the digests its evaluate job wrote beside it (``celldag.jobs.evaluate.write_scores``);
* re-runs — a seeded sample of ``ok`` runs (or the runs named by ``--run``) is run again from its
  record alone in a scratch directory, scored with the other recorded outputs of its dataset and seed
  as the evaluate job scored it, and its output and scores are compared with the recorded ones: bit
  for bit for runs recorded on a CPU, within ``CUDA_TOLERANCE`` for runs recorded on a CUDA device.

Re-runs and scoring run in child processes with the thread settings of the original jobs: Snakemake
gives a job's process ``OMP_NUM_THREADS`` & co. equal to its threads, and BLAS results differ in
their last bits between thread counts.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from celldag import artifacts
from celldag import plan as planning
from celldag.annotation.scoring import options as annotation_options
from celldag.artifacts import sha256_file
from celldag.errors import InputError
from celldag.jobs.evaluate import score_dataset, score_digests
from celldag.jobs.runner import run_method
from celldag.provenance import package_versions
from celldag.records import AUDITED_FIELDS, RecordError, read_record
from celldag.registry import DEFAULT_CONFIG, load_workflow_config
from celldag.report.leaderboard import aggregate
from celldag.results import qc
from celldag.results.output_differences import output_differences, score_differences
from celldag.results.tolerance import CUDA_TOLERANCE, Tolerance, plural
from celldag.tracks import load_track, tracks_of

EVALUATE_THREADS = 1  # workflow/rules/evaluate.smk: the scoring job's threads
SNAKEMAKE_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)  # what Snakemake sets for a job
SHOWN_RUNS = 4  # runs named per changed input before "…"


# ------------------------------------------------------------------------------------------ report


@dataclass
class Report:
    """Prints the audit's lines; counts its problems and, by kind, its findings for the summary."""

    problems: int = 0
    counts: defaultdict = field(default_factory=lambda: defaultdict(int))

    def say(self, line: str, problem: bool = False, kind: str | None = None) -> None:
        self.problems += problem
        if kind:
            self.counts[kind] += 1
        print(line, flush=True)  # a re-run takes a while: each line as soon as it is known


def used_by(runs: list[str]) -> str:
    shown = ", ".join(runs[:SHOWN_RUNS]) + (", …" if len(runs) > SHOWN_RUNS else "")
    return f"used by {plural(len(runs), 'run')}: {shown}"


# ------------------------------------------------------------------------------------------ config


def named_runs(texts: list[str], runs: tuple[planning.Run, ...]) -> list[planning.Run]:
    by_id = {run.name: run for run in runs}
    unknown = [text for text in texts if text not in by_id]
    if unknown:
        raise InputError(
            f"--run {unknown[0]}: not a run of this configuration "
            f"(DATASET/METHOD/VARIANT/SEED, e.g. {next(iter(by_id))})"
        )
    return [by_id[text] for text in dict.fromkeys(texts)]


# ------------------------------------------------------------------------------------------ records


def load_records(runs, report: Report) -> dict[planning.Run, dict]:
    records = {}
    for run in runs:
        path = run.record
        if not Path(path).is_file():
            report.say(f"missing: {path} (run {run.name})", problem=True, kind="missing")
            continue
        try:
            records[run] = read_record(path, AUDITED_FIELDS)
        except RecordError as err:
            report.say(f"error: {err}", problem=True, kind="error")
    return records


# ------------------------------------------------------------------------------------------ checksums


class Digests:
    """sha256 of files, each read once; None for a missing file."""

    def __init__(self) -> None:
        self._known: dict[str, str | None] = {}

    def __call__(self, path: str) -> str | None:
        if path not in self._known:
            self._known[path] = sha256_file(path) if Path(path).is_file() else None
        return self._known[path]


def recorded_files(records: dict[planning.Run, dict]) -> dict[tuple[str, str, str], list[str]]:
    """(kind, path, recorded sha256) → the runs that recorded it; kind: input, source or output."""
    uses = defaultdict(list)
    for run, record in sorted(records.items(), key=lambda item: item[0].record):
        for kind, checksums in (
            ("input", record["input_sha256"]),
            ("source", record["source_sha256"]),
            ("output", {run.output: record["output_sha256"]}),
        ):
            for path, digest in checksums.items():
                uses[(kind, path, digest)].append(run.name)
    return uses


def check_files(records: dict[planning.Run, dict], digest: Digests, report: Report) -> set[str]:
    """One line per changed or missing file; returns their paths."""
    damaged = set()
    for (kind, path, recorded), runs in sorted(recorded_files(records).items()):
        actual = digest(path)
        report.counts["files"] += 1
        if actual == recorded:
            continue
        damaged.add(path)
        status = "missing" if actual is None else f"{kind} changed"
        whose = f"run {runs[0]}" if kind == "output" else used_by(runs)
        report.say(f"{status}: {path} ({whose})", problem=True, kind="missing" if actual is None else "changed")
    return damaged


def check_scores_table(path: str, digest: Digests, report: Report) -> None:
    """The table against the digests its evaluate job wrote beside it: edited rows by run and metric."""
    sidecar = planning.checksums_path(path)
    for needed in (path, sidecar):
        if digest(needed) is None:
            report.say(f"missing: {needed}", problem=True, kind="missing")
            return
    report.counts["scores tables"] += 1
    recorded = json.loads(Path(sidecar).read_text())
    if digest(path) == recorded["sha256"]:
        return
    import pandas as pd

    table = pd.read_parquet(path)
    now = score_digests(table)
    values = {
        (f"{d}/{m}/{v}/{s}", metric): value
        for d, m, v, s, metric, value in table[["dataset", "method", "variant", "seed", "metric", "value"]].itertuples(
            index=False
        )
    }
    for run, metric in edited_rows(recorded["rows"], now):
        value = f"now {values[run, metric]!r}" if (run, metric) in values else "row removed"
        report.say(
            f"score changed: {run} {metric} in {path} ({value}; not the row its evaluate job wrote, "
            f"whose digest is in {sidecar})",
            problem=True,
            kind="changed",
        )
    if now == recorded["rows"]:  # same rows, other bytes (e.g. rewritten by another parquet writer)
        report.say(f"scores file changed: {path} (its rows are those evaluate wrote)", problem=True, kind="changed")


AGGREGATE_KEYS = {
    "scores": ["dataset", "method", "variant", "seed", "metric"],
    "runs": ["dataset", "method", "variant", "seed"],
    "floor_cards": ["dataset", "track", "metric"],
    "qc": ["severity", "check", "dataset", "method", "variant", "metric", "detail"],
}


def check_aggregate(plan, config, registries, readable: int, report: Report) -> None:
    """The tables people read — results/<name>/scores.parquet, runs.parquet, floor_cards.parquet, qc.parquet and
    leaderboard.md (with the reference's margins and cost findings as those files recorded them: the reference may
    have been remade since) — against what the per-dataset scores tables and run records give: the aggregate job is
    rebuilt in a scratch folder from them (themselves checked above) and every row and line compared. ``readable``: how
    many run records load_records read; with one unreadable (said there) the tables cannot be rebuilt."""
    import pandas as pd

    shown = {
        "scores": planning.SCORES,
        "runs": planning.RUNS,
        "floor_cards": planning.FLOOR_CARDS,
        "qc": planning.QC,
        "leaderboard": planning.LEADERBOARD,
    }
    shown = {kind: pattern.format(name=plan.name) for kind, pattern in shown.items()}
    records = [run.record for run in (*plan.runs, *plan.chained)]
    score_paths = [*plan.dataset_scores, *plan.chained_scores]
    if not all(Path(path).is_file() for path in [*score_paths, *records]):
        report.say(f"not checked: {', '.join(shown.values())} (a scores table or run record they come from is missing)")
        return
    if readable < len(records):
        report.say(f"not checked: {', '.join(shown.values())} (a run record they come from is unreadable)")
        return
    evaluation = config["evaluation"]
    with tempfile.TemporaryDirectory(prefix="celldag-audit-") as scratch:
        rebuilt = {kind: str(Path(scratch) / Path(path).name) for kind, path in shown.items()}
        aggregate(
            score_paths=score_paths,
            record_paths=records,
            scores_path=rebuilt["scores"],
            runs_path=rebuilt["runs"],
            leaderboard_path=rebuilt["leaderboard"],
            baseline=evaluation["delta_baseline"],
            paired=evaluation["paired"],
            notes=evaluation["notes"],
            tracks=tracks_of(registries.tracks),
            kinds=planning.method_kinds(registries) | planning.chained_kinds(plan.chained, registries),
            alpha=annotation_options(evaluation)["alpha"],
            floor_cards_path=rebuilt["floor_cards"],
            qc_path=rebuilt["qc"],
            missing=qc.missing_citations(registries, plan),
            recorded={
                kind: pd.read_parquet(shown[kind]) for kind in ("floor_cards", "qc") if Path(shown[kind]).is_file()
            },
        )
        for kind, path in shown.items():
            report.counts["aggregate files"] += 1
            if not Path(path).is_file():
                report.say(f"missing: {path}", problem=True, kind="missing")
            elif kind == "leaderboard":
                compare_lines(path, rebuilt[kind], report)
            else:
                compare_rows(path, rebuilt[kind], AGGREGATE_KEYS[kind], report)


def compare_rows(path: str, rebuilt_path: str, keys: list[str], report: Report) -> None:
    """One line per row of ``path`` changed, removed or added against the rebuilt table."""
    import pandas as pd

    def rows(table_path: str) -> dict[tuple, dict]:
        table = pd.read_parquet(table_path)
        return {tuple(row[key] for key in keys): row for row in table.to_dict("records")}

    now, expected = rows(path), rows(rebuilt_path)
    for key in sorted(set(now) | set(expected), key=str):
        name = "/".join(map(str, key[:4])) + (f" {key[4]}" if len(key) > 4 else "")
        if key not in now:
            report.say(f"aggregate row removed: {name} from {path}", problem=True, kind="changed")
        elif key not in expected:
            report.say(
                f"aggregate row added: {name} in {path} (no scores table or record has it)",
                problem=True,
                kind="changed",
            )
        else:
            changed = [
                column for column in expected[key] if not same_value(now[key].get(column), expected[key][column])
            ]
            if changed:
                column = changed[0]
                report.say(
                    f"aggregate row changed: {name} in {path} ({column} now {now[key].get(column)!r}; the tables it "
                    f"is built from give {expected[key][column]!r})",
                    problem=True,
                    kind="changed",
                )


def same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b) if not hasattr(a, "__len__") or isinstance(a, str) else list(a) == list(b)


def compare_lines(path: str, rebuilt_path: str, report: Report) -> None:
    """The first line of ``path`` that differs from the rebuilt leaderboard, and how many do."""
    now, expected = Path(path).read_text().splitlines(), Path(rebuilt_path).read_text().splitlines()
    if now == expected:
        return
    differing = [
        i for i in range(max(len(now), len(expected))) if i >= len(now) or i >= len(expected) or now[i] != expected[i]
    ]
    first = differing[0]
    shown = now[first] if first < len(now) else "(no line)"
    wanted = expected[first] if first < len(expected) else "(no line)"
    report.say(
        f"leaderboard changed: {path} line {first + 1}: {shown!r}; the scores give {wanted!r} "
        f"({plural(len(differing), 'differing line')})",
        problem=True,
        kind="changed",
    )


def edited_rows(recorded: dict[str, dict[str, str]], now: dict[str, dict[str, str]]) -> list[tuple[str, str]]:
    """(run, metric) of every row changed, added or removed since the digests were written."""
    keys = {(run, metric) for table in (recorded, now) for run, metrics in table.items() for metric in metrics}
    return sorted(key for key in keys if recorded.get(key[0], {}).get(key[1]) != now.get(key[0], {}).get(key[1]))


def run_scores(table, run: planning.Run) -> dict[str, float]:
    """{metric: value} of one run in a scores table (a dataset's: every seed)."""
    rows = table[(table["method"] == run.method) & (table["variant"] == run.variant) & (table["seed"] == run.seed)]
    return {metric: float(value) for metric, value in zip(rows["metric"], rows["value"])}


# ------------------------------------------------------------------------------------------ re-runs


def tolerance_of(record: dict) -> Tolerance | None:
    return CUDA_TOLERANCE if str(record["device"]).startswith("cuda") else None


def sample_runs(records: dict[planning.Run, dict], size: int, seed: int) -> list[planning.Run]:
    """A seeded sample of the ``ok`` runs: the same results and seed give the same sample. Chained runs
    (annotation) are checked by their files and scores, not re-run: their inputs are checked outputs."""
    finished = sorted(
        run for run, record in records.items() if record["status"] == "ok" and isinstance(run, planning.Run)
    )
    return sorted(random.Random(seed).sample(finished, min(size, len(finished))))


def rerun_kwargs(run: planning.Run, record: dict, scratch: Path) -> dict:
    """run_method's arguments for a re-run of ``record`` whose output goes to ``scratch``.

    The method entry's params become the recorded ones, with the variant adding nothing: run_method
    then runs with exactly the params the record holds (after any CPU fallback of the original job).
    """
    config = record["config"]
    method = config["method"] | {"params": config["params"], "variants": {config["variant"]: {}}}
    run_dir = scratch / run.path(planning.RUN_DIR)
    return dict(
        prepared_path=record["inputs"]["prepared"],
        gene_table_path=record["inputs"].get("gene_table"),
        output_path=str(run_dir / "output.h5ad"),
        record_path=str(run_dir / "run.json"),
        dataset_id=run.dataset,
        dataset_entry=config["dataset"],
        method_id=run.method,
        method_entry=method,
        variant=config["variant"],
        seed=int(record["seed"]),
        threads=int(record["threads"]),
        gpu_requested=tolerance_of(record) is not None,
        cpu_fallback=True,
    )


def child_env(threads: int, cuda: bool) -> dict[str, str]:
    env = dict(os.environ) | dict.fromkeys(SNAKEMAKE_THREAD_VARIABLES, str(threads))
    if not cuda:  # a run recorded on the CPU re-runs there, even where a method's device "auto" would find a GPU
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_job(kind: str, track: str, kwargs: dict, env: dict, log: Path) -> str | None:
    """Run ``run_method`` or ``score_dataset`` in a child process (``python -m celldag.commands.audit``); None
    when it worked, else the last line it wrote (its whole log is ``log``)."""
    spec = log.with_suffix(".json")
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"kind": kind, "track": track, "kwargs": kwargs}, default=str))
    with open(log, "w") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "celldag.commands.audit", str(spec)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            check=False,
        )
    if done.returncode == 0:
        return None
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def _job(argv: list[str]) -> int:
    """The child process of ``run_job``."""
    spec = json.loads(Path(argv[0]).read_text())
    function = {"run": run_method, "score": score_dataset}[spec["kind"]]
    function(**spec["kwargs"], track=load_track(spec["track"]))
    return 0


@dataclass
class Rerun:
    run: planning.Run
    record: dict
    output: str  # the re-run's output.h5ad in the scratch directory
    differences: list[str] = field(default_factory=list)


def rerun(run, record, registries, scratch: Path, report: Report) -> Rerun | None:
    """Re-run one run in ``scratch`` and compare its output with the recorded one."""
    tolerance = tolerance_of(record)
    kwargs = rerun_kwargs(run, record, scratch)
    definition = registries.tracks[record["track"]]["definition"]
    env = child_env(kwargs["threads"], cuda=tolerance is not None)
    failure = run_job("run", definition, kwargs, env, Path(kwargs["output_path"]).with_name("rerun.log"))
    if failure:
        report.say(f"error: re-run of {run.name} failed: {failure}", problem=True, kind="error")
        return None
    device_now = read_record(kwargs["record_path"])["device"]
    if device_now.split(" ")[0] != str(record["device"]).split(" ")[0]:
        report.say(f"note: {run.name} re-ran on {device_now}, was recorded on {record['device']}")
    recorded_path = run.path(planning.RUN_OUTPUT)
    if not Path(recorded_path).is_file():  # said by the checksums; the scores can still be compared
        return Rerun(run, record, kwargs["output_path"], [f"output: {recorded_path} missing"])
    recorded, now = artifacts.read_h5ad(recorded_path), artifacts.read_h5ad(kwargs["output_path"])
    differences = [f"output {why}" for why in output_differences(recorded, now, tolerance)]
    return Rerun(run, record, kwargs["output_path"], differences)


def rescore(dataset: str, reruns: list[Rerun], plan, config, registries, scratch: Path, report: Report):
    """Score the re-run outputs with the other recorded outputs of their seeds, as the evaluate job did;
    the table's path, or None when scoring failed."""
    entry = registries.datasets[dataset]
    seeds = {item.run.seed for item in reruns}
    replaced = {item.run: item.output for item in reruns}
    runs = [run for run in plan.runs_on(dataset) if run.seed in seeds]  # the evaluate job's order
    tables = {
        run.path(planning.GENE_TABLE, embedding=e)
        for run in plan.runs_on(dataset)
        if (e := planning.run_embedding(run, registries))
    }
    scores_path = scratch / "scores" / f"{dataset}.parquet"
    kwargs = dict(
        prepared_paths=sorted({run.path(planning.PREPARED) for run in runs}),
        output_paths=[replaced.get(run, run.path(planning.RUN_OUTPUT)) for run in runs],
        table_paths=sorted(tables),
        scores_path=str(scores_path),
        track_id=entry["track"],
        dataset=entry,
        evaluation=config["evaluation"],
    )
    env = child_env(EVALUATE_THREADS, cuda=False)  # evaluate jobs request no GPU (a cluster shows them none)
    definition = registries.tracks[entry["track"]]["definition"]
    failure = run_job("score", definition, kwargs, env, scores_path.with_suffix(".log"))
    if failure:
        report.say(f"error: scoring the re-runs on {dataset} failed: {failure}", problem=True, kind="error")
        return None
    return scores_path


def compare_scores(item: Rerun, recorded_table, now_table) -> list[str]:
    tolerance = tolerance_of(item.record)
    recorded = run_scores(recorded_table, item.run) if recorded_table is not None else {}
    differences = score_differences(recorded, run_scores(now_table, item.run), tolerance)
    return [
        f"{metric} recorded {'none' if old is None else repr(old)} now {'none' if new is None else repr(new)}"
        for metric, old, new in differences
    ]


def verdict(item: Rerun, n_scores: int | None, report: Report) -> None:
    """``reproduced`` or one ``differs`` line per difference; ``n_scores`` None: scoring failed (said before)."""
    tolerance = tolerance_of(item.record)
    if item.differences or n_scores is None:
        for difference in item.differences:
            report.say(f"differs: {item.run.name} {difference}", problem=True)
        report.counts["differ" if item.differences else "not scored"] += 1
        return
    how = "bit-identical" if tolerance is None else f"within {tolerance}"
    device = str(item.record["device"]).split(" ")[0]
    report.say(f"reproduced: {item.run.name} ({device}; output and {n_scores} scores {how})", kind="reproduced")


def package_notes(item: Rerun, report: Report) -> None:
    """Versions that differ from the record's: the likeliest reason for a difference, said before it."""
    now = package_versions()
    for name, version in sorted(item.record.get("packages", {}).items()):
        if now.get(name) != version:
            report.say(f"note: {item.run.name} recorded {name} {version}, now {now.get(name)}")


# ------------------------------------------------------------------------------------------ audit


def rerun_all(chosen, records, damaged: set[str], context, report: Report) -> None:
    """Re-run and re-score each chosen run whose record and inputs are intact, and say how it compares."""
    with tempfile.TemporaryDirectory(prefix="celldag-audit-") as scratch:  # never under results/
        by_dataset = rerun_chosen(chosen, records, damaged, context[2], Path(scratch), report)
        for dataset, items in sorted(by_dataset.items()):
            judge(dataset, items, context, Path(scratch), report)


def rerun_chosen(
    chosen, records, damaged: set[str], registries, scratch: Path, report: Report
) -> dict[str, list[Rerun]]:
    by_dataset = defaultdict(list)
    for run in chosen:
        record = records.get(run)
        changed = sorted(damaged & set(record["input_sha256"])) if record else []
        if record is None or changed:
            why = f"input changed: {changed[0]}" if changed else "no usable record"
            report.say(f"not re-run: {run.name} ({why})", problem=True, kind="not re-run")
            continue
        if tolerance_of(record):
            report.say(f"note: {run.name} was recorded on {record['device']}: compared within {CUDA_TOLERANCE}")
        if item := rerun(run, record, registries, scratch, report):
            by_dataset[run.dataset].append(item)
    return by_dataset


def judge(dataset: str, items: list[Rerun], context, scratch: Path, report: Report) -> None:
    """Score one dataset's re-runs and say, per run, whether output and scores match the recorded ones."""
    import pandas as pd

    plan, config, registries = context
    now_path = rescore(dataset, items, plan, config, registries, scratch, report)
    recorded_path = planning.DATASET_SCORES.format(name=plan.name, dataset=dataset)
    recorded = pd.read_parquet(recorded_path) if Path(recorded_path).is_file() else None
    now = pd.read_parquet(now_path) if now_path is not None else None
    for item in items:
        package_notes(item, report)
        if now is not None:
            item.differences += compare_scores(item, recorded, now)
        verdict(item, None if now is None else len(run_scores(now, item.run)), report)


def audit(
    configfile: str = DEFAULT_CONFIG,
    sample: int = 3,
    seed: int = 0,
    runs: list[str] | None = None,
    workflow: str = ".",
    config_key: str | None = None,
) -> int:
    """Print the audit of the configuration's results; 0 when everything matched, 1 otherwise.

    Config errors and unknown ``runs`` raise InputError (the CLI's exit status 2).
    """
    if sample < 0:
        raise InputError(f"--sample {sample}: must be 0 or more")
    config, registries = load_workflow_config(configfile, workflow, config_key)
    try:
        plan = planning.make_plan(config, registries)
    except ValueError as err:  # e.g. no (dataset, method) pair of one track: what Snakemake's parse would say
        raise InputError(f"{configfile}: {err}") from None
    chosen_by_name = named_runs(runs, plan.runs) if runs else None
    report = Report()
    report.say(f"audit of results/{plan.name}/: {len(plan.runs)} runs of {configfile}")
    records = load_records((*plan.runs, *plan.chained), report)
    note_other_records(plan, report)
    digest = Digests()
    damaged = check_files(records, digest, report)
    for path in (*plan.dataset_scores, *plan.chained_scores):
        check_scores_table(path, digest, report)
    check_aggregate(plan, config, registries, len(records), report)
    chosen = chosen_by_name if chosen_by_name is not None else sample_runs(records, sample, seed)
    how = "named by --run" if chosen_by_name is not None else f"seeded sample (--sample {sample} --seed {seed})"
    report.say(f"re-running {plural(len(chosen), 'run')}, {how}: {', '.join(run.name for run in chosen) or 'none'}")
    rerun_all(chosen, records, damaged, (plan, config, registries), report)
    report.say(summary(report, len(records), len(chosen)))
    return 1 if report.problems else 0


def note_other_records(plan, report: Report) -> None:
    """results/runs/ is shared with other configurations: their runs are theirs to audit (and to score)."""
    mine = {run.record for run in (*plan.runs, *plan.chained)}
    others = {str(path) for path in Path("results/runs").glob("**/run.json")} - mine
    if others:
        report.say(
            f"note: {plural(len(others), 'other run record')} under results/runs/, of other configurations: not checked"
        )


def summary(report: Report, n_records: int, n_chosen: int) -> str:
    counts = report.counts
    checked = (
        f"{plural(n_records, 'run record')}, {plural(counts['files'], 'file')}, "
        f"{plural(counts['scores tables'], 'scores table')}, "
        f"{plural(counts['aggregate files'], 'aggregate file')} checked "
        f"({counts['changed']} changed, {counts['missing']} missing, {plural(counts['error'], 'error')})"
    )
    reran = (
        f"{plural(n_chosen, 're-run')}: {counts['reproduced']} reproduced, {counts['differ']} differ, "
        f"{counts['not re-run']} not re-run"
    )
    return f"summary: {checked}; {reran} — {'FAILED' if report.problems else 'OK'}"


if __name__ == "__main__":
    sys.exit(_job(sys.argv[1:]))
