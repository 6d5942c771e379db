"""The registries' ``reference:`` and ``license:`` fields (issue 42): every shipped entry cites its works with a DOI
or url and states its license; a lab's entry needs neither and may keep free text; and no key holds them."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO

from celldag import plan
from celldag.bibliography import references_of
from celldag.registry import ConfigError, apply_schema, load_workflow_config, read_yaml

# made by celldag from nothing but a seed, or from another entry's vectors: there is no work to cite but celldag's
GENERATED_PROVIDERS = ("celldag.embeddings.providers:random_vectors", "celldag.embeddings.providers:shuffled")


@pytest.fixture(scope="module")
def shipped():
    return load_workflow_config(str(REPO / "config" / "config.yaml"), str(REPO))[1]


def test_every_shipped_entry_cites_works_with_a_doi_or_url_and_states_its_license(shipped):
    entries = {
        **{f"method {k}": e for k, e in shipped.methods.items()},
        **{f"dataset {k}": e for k, e in shipped.datasets.items()},
        **{f"embedding {k}": e for k, e in shipped.embeddings.items() if e["provider"] not in GENERATED_PROVIDERS},
    }
    for name, entry in entries.items():
        works = references_of(entry)
        assert works and all(isinstance(work, dict) and (work.get("doi") or work.get("url")) for work in works), name
        assert entry.get("license"), name
    for track_id, entry in shipped.tracks.items():  # the works behind each track's metrics (no license: no code)
        assert entry.get("references"), track_id
        for family, spec in entry["references"].items():
            works = references_of(spec)
            assert works and all(isinstance(work, dict) and (work.get("doi") or work.get("url")) for work in works), (
                f"track {track_id}: {family}"
            )


def test_a_labs_entry_validates_without_reference_or_license_and_with_free_text():
    method = {"track": "lineage", "run": "lab.net:run", "description": "ours"}
    assert "license" not in apply_schema({"lab_net": copy.deepcopy(method)}, "methods", "lab")["lab_net"]
    apply_schema({"lab_net": method | {"reference": "Us et al. Our net. 2024."}}, "methods", "lab")
    with pytest.raises(ConfigError, match=r"lab_net\.reference"):
        apply_schema(
            {"lab_net": method | {"reference": {"title": "no authors", "venue": "x", "year": 2024}}}, "methods", "lab"
        )
    with pytest.raises(ConfigError, match=r"lab_net\.reference"):
        apply_schema(
            {
                "lab_net": method
                | {
                    "reference": {
                        "authors": ["Us"],
                        "title": "t",
                        "venue": "v",
                        "year": 2024,
                        "doi": "https://doi.org/10.1/x",
                    }
                }
            },
            "methods",
            "lab",
        )


def test_the_four_schemas_define_a_reference_alike():
    """The methods, datasets and gene-embeddings registries' `reference:` and the tracks registry's `references:`
    families (celldag cite) read a work alike."""
    definitions = [
        read_yaml(REPO / "src" / "celldag" / "schemas" / f"{kind}.schema.yaml")["$defs"]
        for kind in ("methods", "datasets", "embeddings", "tracks")
    ]
    assert definitions[0] == definitions[1] == definitions[2] == definitions[3]
    families = read_yaml(REPO / "src" / "celldag" / "schemas" / "tracks.schema.yaml")["additionalProperties"]
    assert families["properties"]["references"]["additionalProperties"]["properties"]["reference"] == {
        "$ref": "#/$defs/reference"
    }


def test_no_key_holds_a_reference_or_a_methods_license(shipped):
    dataset = shipped.datasets["bm_default"]
    recited = dataset | {"reference": "another work"}
    assert plan.data_key(recited) == plan.data_key(dataset)
    assert plan.run_key(recited, {"k": 1}) == plan.run_key(dataset, {"k": 1})
    assert plan.data_key(dataset | {"license": "other"}) != plan.data_key(dataset)  # a dataset's license keys it still
    methods = {name: shipped.methods[name] for name in ("knn", "logistic")}
    relicensed = {name: entry | {"license": "other", "reference": "x"} for name, entry in methods.items()}
    assert plan.chain_key({}, relicensed) == plan.chain_key({}, methods)
    assert plan.chain_key({}, {"knn": methods["knn"] | {"params": {}}}) != plan.chain_key({}, {"knn": methods["knn"]})
