"""Gene ids (celldag.embeddings.gene_ids): human Ensembl ids mapped to symbols through the real org.Hs.eg.db for
every gene-embedding provider, the counts in the run and on the leaderboard; mouse genes not_applicable."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import anndata
import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TRACKS

from celldag import plan
from celldag.embeddings import embed_genes, gene_ontology, read_table, write_table
from celldag.embeddings.gene_ids import map_ensembl
from celldag.embeddings.job import write_gene_table
from celldag.errors import InputError
from celldag.methods import NotApplicable
from celldag.methods.scilama.method import modelled_genes
from celldag.plan import ORG_ROLE, declared_genes, gene_table_files
from celldag.registry import ConfigError, apply_schema, read_yaml
from celldag.representation.track import RepresentationInput

FROM_FILE = "celldag.embeddings.providers:from_file"
TP53, BRCA1, EGFR, PMM2 = "ENSG00000141510", "ENSG00000012048", "ENSG00000146648", "ENSG00000140650"
MRPL23, MRPL23_COPY = "ENSG00000214026", "ENSG00000276345"  # two ids NCBI links to MRPL23's one gene
BOLA2 = "ENSG00000169627"  # linked to BOLA2 and BOLA2B, both protein-coding
MADE_UP = "ENSG00000999999"  # no gene has it
# a dataset's var_names (BRCA1 with a GENCODE version), in the file's order
DATASET_IDS = [EGFR, MADE_UP, f"{BRCA1}.23", MRPL23_COPY, TP53, BOLA2, PMM2, MRPL23]
MAPPED = {EGFR: "EGFR", f"{BRCA1}.23": "BRCA1", TP53: "TP53", PMM2: "PMM2", MRPL23: "MRPL23"}
MAPPING = {"gene_ids": "ensembl", "n_ids": 8, "n_symbols": 5, "n_without_symbol": 1, "n_ambiguous": 2}
NOTE = "genes: 8 Ensembl ids → 5 symbols (1 without a symbol, 2 ambiguous dropped)"
NO_ORTHOLOGY = "mouse genes; no offline orthology mapping to the human gene table"


def symbol_table(tmp_path: Path, symbols: list[str]) -> tuple[Path, dict[str, np.ndarray]]:
    """A precomputed table keyed by symbols, as the published ones are (csv: gene, then the numbers)."""
    vectors = {symbol: np.random.default_rng(i).normal(size=4).astype(np.float32) for i, symbol in enumerate(symbols)}
    path = tmp_path / "symbols.csv"
    pd.DataFrame(list(vectors.values()), index=list(vectors)).to_csv(path, header=False)
    return path, vectors


# ---------------------------------------------------------------- the mapping


def test_human_ensembl_ids_map_to_symbols_one_to_one_through_org_hs_eg_db(org_db):
    with closing(gene_ontology.open_annotation(org_db)) as db:
        mapped = map_ensembl(db, DATASET_IDS)
    # dataset order; the version ignored; PMM2's id is also linked to an ncRNA gene: the protein-coding one wins;
    # MRPL23's second id finds its symbol taken by the first in sorted order, BOLA2's names two coding genes: dropped
    assert mapped.symbols == MAPPED and list(mapped.symbols) == [g for g in DATASET_IDS if g in MAPPED]
    assert mapped.facts() == MAPPING


def test_every_provider_gets_symbols_and_its_table_is_keyed_by_the_datasets_ids(tmp_path, org_db):
    table_path, vectors = symbol_table(tmp_path, ["TP53", "EGFR", "MRPL23", "PMM2", "GAPDH"])  # BRCA1: no vector
    files = {"table": str(table_path), ORG_ROLE: str(org_db)}
    table, facts = embed_genes(FROM_FILE, {"format": "csv"}, DATASET_IDS, files, seed=0, gene_ids="ensembl")
    assert table["gene_id"].tolist() == [EGFR, TP53, PMM2, MRPL23]  # the dataset's ids, in its order
    for gene, vector in zip(table["gene_id"], table["embedding"]):
        np.testing.assert_array_equal(vector, vectors[MAPPED[gene]])
    assert facts["gene_id_mapping"] == MAPPING and (facts["n_genes_requested"], facts["n_genes_embedded"]) == (8, 4)

    write_table(table, tmp_path / "go_text.parquet")
    read = read_table(tmp_path / "go_text.parquet")
    assert read.gene_ids == (EGFR, TP53, PMM2, MRPL23) and read.mapping == MAPPING
    assert read.mapping_facts() == {"gene_id_mapping": MAPPING, "note": NOTE}
    # a control built on that table: its provider sees the table by symbols too, and hands back the dataset's ids
    shuffled, _ = embed_genes(
        "celldag.embeddings.providers:shuffled", {}, DATASET_IDS, files, seed=0, base_table=read, gene_ids="ensembl"
    )
    assert sorted(shuffled["gene_id"]) == sorted(read.gene_ids)


def test_ensembl_ids_need_the_mapping_file_and_a_dataset_of_symbols_is_mapped_by_nothing(tmp_path):
    table_path, _ = symbol_table(tmp_path, ["TP53", "EGFR"])
    with pytest.raises(ValueError, match="needs the input file 'org_hs_eg_sqlite'"):
        embed_genes(FROM_FILE, {"format": "csv"}, [TP53, EGFR], {"table": str(table_path)}, seed=0, gene_ids="ensembl")
    table, facts = embed_genes(FROM_FILE, {"format": "csv"}, ["EGFR", "TP53"], {"table": str(table_path)}, seed=0)
    assert table.attrs == {} and "gene_id_mapping" not in facts and read_written(tmp_path, table).mapping_facts() == {}


def test_ensembl_ids_declared_as_symbols_stop_with_the_declaration_to_make(tmp_path):
    table_path, _ = symbol_table(tmp_path, ["TP53", "EGFR"])
    with pytest.raises(
        InputError, match="look like Ensembl ids: declare `gene_ids: ensembl` in the dataset's registry"
    ):
        embed_genes(FROM_FILE, {"format": "csv"}, [TP53, EGFR], {"table": str(table_path)}, seed=0)


def read_written(tmp_path: Path, table: pd.DataFrame):
    write_table(table, tmp_path / "table.parquet")
    return read_table(tmp_path / "table.parquet")


# ---------------------------------------------------------------- through the run record to the leaderboard


def lab_dataset(tmp_path: Path, genes: list[str], **declaration) -> tuple[dict, dict]:
    """A lab's representation h5ad whose var_names are ``genes``, with its registry entry (``declaration``:
    gene_ids, species) and files."""
    rng = np.random.default_rng(0)
    obs = pd.DataFrame(
        {"cell_type": np.repeat(["A", "B"], 20), "donor": np.tile(["d1", "d2"], 20)}, index=[f"c{i}" for i in range(40)]
    )
    counts = rng.poisson(3.0, size=(40, len(genes))).astype(np.float32) + 1
    anndata.AnnData(counts, obs=obs, var=pd.DataFrame(index=genes)).write_h5ad(tmp_path / "lab.h5ad")
    entry = {
        "track": "representation",
        "source": "local",
        "loader": "celldag.data.h5ad:prepare_h5ad",
        "description": "lab",
        "license": "internal",
        "files": [{"name": "lab.h5ad", "path": str(tmp_path / "lab.h5ad")}],
        "params": {
            "file": "lab.h5ad",
            "label_key": "cell_type",
            "batch_key": "donor",
            "counts_layer": "X",
            "lognorm_layer": None,
            "min_genes": 1,
        },
    } | declaration
    return entry, {"lab.h5ad": str(tmp_path / "lab.h5ad")}


def run_genept_w(tmp_path: Path, entry: dict, files: dict, table_files: dict, registries) -> dict:
    """The pipeline's steps in-process: prepare, gene list, embed_genes (from a symbol table), genept_w; its
    run.json."""
    from celldag.jobs.prepare import write_dataset_genes, write_prepared_dataset
    from celldag.jobs.runner import run_method

    write_prepared_dataset("lab", entry, TRACKS["representation"], 0, str(tmp_path / "seed0.h5ad"), files)
    write_dataset_genes(str(tmp_path / "seed0.h5ad"), str(tmp_path / "genes.txt"))
    embedding = {"provider": FROM_FILE, "params": {"format": "csv"}}
    write_gene_table(
        embedding_id="go_text",
        entry=embedding,
        inputs={"genes": str(tmp_path / "genes.txt")} | table_files,
        table_path=str(tmp_path / "go_text.parquet"),
        facts_path=str(tmp_path / "go_text.json"),
        dataset_entry=entry,
    )
    run_method(
        prepared_path=str(tmp_path / "seed0.h5ad"),
        gene_table_path=str(tmp_path / "go_text.parquet"),
        output_path=str(tmp_path / "run" / "output.h5ad"),
        record_path=str(tmp_path / "run" / "run.json"),
        dataset_id="lab",
        dataset_entry=entry,
        method_id="genept_w",
        method_entry=registries.methods["genept_w"],
        variant="default",
        seed=0,
        track=TRACKS["representation"],
    )
    return json.loads((tmp_path / "run" / "run.json").read_text())


def test_a_run_on_ensembl_ids_records_the_mapping_and_the_leaderboard_shows_it(tmp_path, org_db, registries):
    from celldag.report.leaderboard import collect_runs, run_notes

    table_path, _ = symbol_table(tmp_path, ["TP53", "BRCA1", "EGFR", "PMM2", "MRPL23"])
    entry, files = lab_dataset(tmp_path, DATASET_IDS, gene_ids="ensembl")
    record = run_genept_w(tmp_path, entry, files, {"table": str(table_path), ORG_ROLE: str(org_db)}, registries)
    assert record["status"] == "ok"
    assert record["method_facts"]["gene_id_mapping"] == MAPPING and record["method_facts"]["note"] == NOTE
    assert record["method_facts"]["genes"] == {"n_modelled": 5, "n_without_embedding": 3}
    (paragraph,) = run_notes(collect_runs([str(tmp_path / "run" / "run.json")]), "lab")
    assert paragraph.lines == (f"`genept_w/default` (seeds 0): {NOTE}",)


@pytest.mark.slow
def test_mouse_genes_are_not_applicable_never_a_run_on_the_names_that_match(tmp_path, registries):
    table_path, _ = symbol_table(tmp_path, ["EGFR", "TP53"])  # "EGFR" is also a name in the mouse dataset
    genes = ["Trp53", "Brca1", "EGFR", "Gapdh", "Actb"]
    entry, files = lab_dataset(tmp_path, genes, species="mouse")
    record = run_genept_w(tmp_path, entry, files, {"table": str(table_path)}, registries)
    assert (record["status"], record["status_reason"]) == ("not_applicable", NO_ORTHOLOGY)
    facts = json.loads((tmp_path / "go_text.json").read_text())
    assert (facts["n_genes_embedded"], facts["not_applicable"]) == (0, NO_ORTHOLOGY)

    # sciLaMA: the variants that read the table are not_applicable; the ones that do not still run
    table = read_table(tmp_path / "go_text.parquet")
    inputs = RepresentationInput(
        names=("c0",),
        features=np.zeros((1, 5), np.float32),
        gene_names=tuple(genes),
        batch=np.array(["b"]),
        train_mask=np.array([True]),
        lognorm=np.zeros((1, 5)),
        counts=None,
        gene_embedding=table,
    )
    with pytest.raises(NotApplicable, match=NO_ORTHOLOGY):
        modelled_genes(inputs, {"use_gene_vae": True, "gene_input": "embeddings"})
    columns, vectors = modelled_genes(inputs, {"use_gene_vae": True, "gene_input": "self_informed"})
    assert len(columns) == 5 and vectors is None


# ---------------------------------------------------------------- the registry


def test_datasets_declare_gene_ids_and_species_and_entries_without_them_keep_their_keys():
    datasets = read_yaml(REPO / "config/datasets.yaml")
    before = plan.data_key(
        apply_schema(read_yaml(REPO / "config/datasets.yaml"), "datasets", "datasets.yaml")["pbmc3k"]
    )
    datasets["lab"] = datasets["pbmc3k"] | {"gene_ids": "ensembl", "species": "mouse"}
    checked = apply_schema(datasets, "datasets", "datasets.yaml")
    assert declared_genes(checked["lab"]) == ("ensembl", "mouse")
    # the defaults are not written into entries: an entry that leaves them out keeps its prepared files' key
    assert declared_genes(checked["pbmc3k"]) == ("symbol", "human") and plan.data_key(checked["pbmc3k"]) == before
    for field, value in (("gene_ids", "entrez"), ("species", "zebrafish")):
        with pytest.raises(ConfigError, match=f"lab.{field}: '{value}' is not one of"):
            apply_schema(datasets | {"lab": datasets["pbmc3k"] | {field: value}}, "datasets", "datasets.yaml")


def test_a_table_of_ensembl_ids_reads_org_hs_eg_db_whatever_its_source(registries):
    ensembl, symbols = {"gene_ids": "ensembl"}, {"gene_ids": "symbol"}
    org = next(f for f in registries.embeddings["go_text"]["files"] if f["role"] == ORG_ROLE)
    assert gene_table_files("genept_ada", ensembl, registries.embeddings) == [
        *registries.embeddings["genept_ada"]["files"],
        org,
    ]
    assert gene_table_files("random_384", ensembl, registries.embeddings) == [org]
    for embedding in ("go_text", "genept_ada"):  # go_text lists it already; a dataset of symbols maps nothing
        assert gene_table_files(embedding, symbols, registries.embeddings) == registries.embeddings[embedding]["files"]
    assert gene_table_files("go_text", ensembl, registries.embeddings) == registries.embeddings["go_text"]["files"]
    assert gene_table_files("random_384", ensembl | {"species": "mouse"}, registries.embeddings) == []  # nothing to map


def test_the_plan_downloads_org_hs_eg_db_for_a_dataset_of_ensembl_ids_only():
    """What a run downloads (and so what `celldag prefetch` fetches) includes the mapping's database for CellBench's
    Ensembl ids, and not for a dataset of symbols, on a table (GenePT's) that does not list it itself."""
    from celldag.registry import load_config

    def downloads(dataset: str) -> set[str]:
        config, registries = load_config(
            {"datasets": [dataset], "methods": ["scilama/genept"], "seeds": [0]}, "config.yaml", root=REPO
        )
        return {
            path for path in plan.make_plan(config, registries).downloads if path.startswith("resources/embeddings/")
        }

    org = plan.DOWNLOAD.format(source=plan.EMBEDDING_SOURCE, file="org.Hs.eg.sqlite")
    assert org in downloads("cellbench_protocols") and org not in downloads("pbmc68k_batched")
    assert downloads("cellbench_protocols") - {org} == downloads("pbmc68k_batched")
