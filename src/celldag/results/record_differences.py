"""What two run records say differently about where and on what their runs ran (``celldag compare``).

A record is flattened to text fields — the input checksums by role, package versions by name, device,
host, threads, config_hash, params, the machine section (``celldag.provenance``), CUDA_VISIBLE_DEVICES and
whether it was a SLURM job — and two records' fields are compared; a section an older record lacks is
compared as a whole ("not recorded"), not field by field.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from celldag.results.tolerance import plural

RECORD, MACHINE = "run record", "machine"
NOT_RECORDED, ABSENT = "not recorded", "absent"  # a section the record predates; a field on one side only
INPUT = "input "  # the prefix of input-checksum fields: a different input explains every other difference


def text(value) -> str:
    return "none" if value is None else str(value)


def machine_facts(machine: dict | None) -> dict[str, str]:
    if machine is None:  # recorded since celldag compare
        return {MACHINE: NOT_RECORDED}
    facts = {
        MACHINE: "recorded",
        "machine.cpu_model": text(machine["cpu_model"]),
        "machine.isa": " ".join(machine["isa"]) or "none",
        "machine.cpus": text(machine["cpus"]),
        "machine.os": text(machine["os"]),
    }
    libraries = defaultdict(list)  # e.g. libgomp and torch's own OpenMP: both "openmp"
    for library in machine["libraries"]:
        parts = (library["version"], library["architecture"], f"({library['num_threads']} threads, {library['file']})")
        libraries[f"machine.{library['internal_api']}"].append(" ".join(str(part) for part in parts if part))
    facts |= {name: "; ".join(sorted(found)) for name, found in libraries.items()}
    facts |= {f"machine.threads.{name}": text(value) for name, value in machine["threads"].items()}
    # variables that pick other kernels, where set (recorded since celldag check: none in older records)
    facts |= {f"machine.kernels.{name}": value for name, value in machine.get("kernels", {}).items()}
    facts |= {f"machine.gpu.{name}": text(value) for name, value in (machine["gpu"] or {}).items()}
    return facts


def run_facts(record: dict | None) -> dict[str, str]:
    """A run record's fields that say what the run read and what it ran on, flattened to text."""
    if record is None:
        return {RECORD: "missing"}
    roles = {path: role for role, path in record.get("inputs", {}).items()}
    facts = {RECORD: "found"}
    facts |= {
        f"{INPUT}{roles.get(path, path)}": f"sha256 {digest[:12]}…" for path, digest in record["input_sha256"].items()
    }
    facts |= {name: text(version) for name, version in record.get("packages", {}).items()}
    facts |= {name: text(record[name]) for name in ("device", "host", "threads") if name in record}
    facts["config_hash"] = f"{record['config_hash'][:12]}…"
    facts |= {f"params.{name}": text(value) for name, value in record["config"]["params"].items()}
    environment = record.get("environment", {})
    facts["CUDA_VISIBLE_DEVICES"] = text(environment.get("CUDA_VISIBLE_DEVICES"))
    # a job's id differs from run to run: what sets two places apart is whether the run was a SLURM job
    facts["SLURM job"] = "yes" if environment.get("SLURM_JOB_ID") else "no"
    return facts | machine_facts(record.get("machine"))


def differing_facts(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    """field → (A's value, B's value) where they differ; a section one record predates is compared as a whole."""
    if "missing" in (a[RECORD], b[RECORD]):
        return {RECORD: (a[RECORD], b[RECORD])} if a[RECORD] != b[RECORD] else {}
    unrecorded = NOT_RECORDED in (a[MACHINE], b[MACHINE])
    fields = sorted(set(a) | set(b), key=lambda name: (not name.startswith(INPUT), name))
    pairs = {
        name: (a.get(name, ABSENT), b.get(name, ABSENT))
        for name in fields
        if not (unrecorded and name.startswith(f"{MACHINE}."))
    }
    return {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}


@dataclass(frozen=True)
class FieldDifference:
    """One record field over the matched runs: in how many it differs, and its values there on each side."""

    field: str
    runs: int
    of: int
    a: tuple[str, ...]
    b: tuple[str, ...]

    def __str__(self) -> str:
        share = f"all {plural(self.of, 'run')}" if self.runs == self.of else f"{self.runs} of {plural(self.of, 'run')}"
        return f"{self.field} {shown(self.a)} → {shown(self.b)} ({share})"


def shown(values: tuple[str, ...], most: int = 3) -> str:
    return ", ".join(values[:most]) + (f", … ({len(values)} values)" if len(values) > most else "")


Differences = dict[str, tuple[str, str]]  # field → (A's value, B's value)


def record_differences(
    a: dict[tuple, dict | None], b: dict[tuple, dict | None]
) -> tuple[dict[tuple, Differences], list[FieldDifference]]:
    """Of two sides' records by run (None: no file), per run on both sides the fields that differ
    and per field a summary (its values by how many runs have them): inputs first, then by the most runs."""
    matched = sorted(set(a) & set(b))
    per_run = {key: differing_facts(run_facts(a[key]), run_facts(b[key])) for key in matched}
    values = defaultdict(lambda: (Counter(), Counter()))
    for differences in per_run.values():
        for name, (mine, theirs) in differences.items():
            values[name][0][mine] += 1
            values[name][1][theirs] += 1
    summary = [
        FieldDifference(
            name,
            sum(mine.values()),
            len(matched),
            tuple(v for v, _ in mine.most_common()),
            tuple(v for v, _ in theirs.most_common()),
        )
        for name, (mine, theirs) in values.items()
    ]
    summary.sort(key=lambda item: (not item.field.startswith(INPUT), -item.runs, item.field))
    return per_run, summary
