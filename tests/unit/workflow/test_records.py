"""The run record's one contract and reader (celldag.records): refused in one line naming the file and the field,
written only when whole, and read in one place (no other module of src/ or workflow/ parses a run.json)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO

from celldag import records


def whole_record() -> dict:
    record = {}
    for dotted in sorted(records.AUDITED_FIELDS, key=lambda name: -name.count(".")):  # config.method.run first
        parts = dotted.split(".")
        place = record
        for part in parts[:-1]:
            place = place.setdefault(part, {})
        place.setdefault(parts[-1], "x")
    return record


def test_a_whole_record_reads_back_as_written(tmp_path):
    path = tmp_path / "run.json"
    records.write_record(whole_record(), path)
    assert records.read_record(path, records.AUDITED_FIELDS) == whole_record()


@pytest.mark.parametrize("dotted", ["seed", "config.params", "input_sha256"])
def test_a_record_without_a_field_is_refused_naming_the_file_and_the_field(tmp_path, dotted):
    record = whole_record()
    *outer, last = dotted.split(".")
    place = record
    for part in outer:
        place = place[part]
    del place[last]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    with pytest.raises(records.RecordError, match=rf"run\.json: field '{re.escape(dotted)}' missing"):
        records.read_record(path)
    with pytest.raises(records.RecordError, match=re.escape(dotted)):
        records.write_record(record, tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()  # nothing half-written


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("{not json")
    with pytest.raises(records.RecordError, match="run.json: not a JSON run record"):
        records.read_record(path)
    path.write_text("[1, 2]")
    with pytest.raises(records.RecordError, match="a list, not an object"):
        records.read_record(path)


def test_the_audit_asks_for_more_than_the_leaderboard():
    path_fields = set(records.AUDITED_FIELDS) - set(records.FIELDS)
    assert {"output_sha256", "source_sha256", "inputs.prepared"} <= path_fields


def test_run_records_are_parsed_in_one_place():
    """A grep of src/ and workflow/ finds one JSON read of a run record: records.read_record's."""
    readers = []
    for path in [
        *(REPO / "src").rglob("*.py"),
        *(REPO / "workflow").rglob("*.py"),
        *(REPO / "workflow").rglob("*.smk"),
    ]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"json\.loads?\(", line) and re.search(r"\b\w*record(s|_paths?)?\b|run\.json", line):
                readers.append(f"{path.relative_to(REPO)}:{number}")
    assert [reader.split(":")[0] for reader in readers] == ["src/celldag/records.py"], readers
