"""The run record (``run.json``, written by every run and chained run): its contract, its one writer and its one
reader; the facts it holds are collected by ``celldag.provenance``. The aggregate job, ``celldag audit``, ``celldag
compare``, ``celldag check`` and a chained track's jobs all read records through ``read_record``; a record that is not
JSON or lacks a field its reader needs is refused in one line naming the file and the field.

``FIELDS`` are what every record has held since records existed, and what the leaderboard and compare read;
``AUDITED_FIELDS`` add what ``celldag audit`` needs to re-run a run (records written before the audit lack some).
Optional sections — ``machine`` (since celldag compare), ``method_facts`` — are read with ``.get``.
"""

from __future__ import annotations

import json
from pathlib import Path

from celldag import artifacts
from celldag.errors import InputError

FIELDS = (
    "dataset_id",
    "method_id",
    "variant",
    "seed",
    "status",
    "track",
    "device",
    "config_hash",
    "config.params",
    "input_sha256",
)
AUDITED_FIELDS = (
    *FIELDS,
    "threads",
    "config.dataset",
    "config.method",
    "config.method.run",
    "config.variant",
    "inputs.prepared",
    "output_sha256",
    "source_sha256",
)


class RecordError(InputError):
    """A run record that is not JSON or lacks a field its reader needs."""


def field_of(record: dict, dotted: str):
    """``record["config"]["method"]`` for ``"config.method"``; KeyError naming the dotted field where one is missing."""
    value = record
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def check_record(record: dict, path: str | Path, fields: tuple[str, ...] = FIELDS) -> None:
    for dotted in fields:
        try:
            field_of(record, dotted)
        except KeyError:
            raise RecordError(
                f"{path}: field '{dotted}' missing from the run record (records written by an older "
                "celldag lack some fields; rerunning the run rewrites its record)"
            ) from None


def read_record(path: str | Path, fields: tuple[str, ...] = FIELDS) -> dict:
    """The run record at ``path`` holding every field of ``fields``, else one RecordError naming the file and field."""
    try:
        record = json.loads(Path(path).read_text())
    except ValueError as err:
        raise RecordError(f"{path}: not a JSON run record ({err})") from None
    if not isinstance(record, dict):
        raise RecordError(f"{path}: not a JSON run record (a {type(record).__name__}, not an object)")
    check_record(record, path, fields)
    return record


def write_record(record: dict, path: str | Path) -> None:
    """Checked against the contract before it is written (atomically: no half record is ever read)."""
    check_record(record, path, AUDITED_FIELDS)
    artifacts.write_json(record, path)
