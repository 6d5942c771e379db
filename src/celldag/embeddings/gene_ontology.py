"""Human gene annotation from Bioconductor's org.Hs.eg.db and GO.db SQLite files (read-only; no R).

Three things are derived from them: dataset gene symbols → org.Hs.eg gene keys (``_id``), a short
description text per gene (full name plus its GO terms, the offline stand-in for GenePT's NCBI
summaries), and the gene × GO-term incidence matrix.
"""

from __future__ import annotations

import os
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ONTOLOGIES = {"bp": "Biological process", "mf": "Molecular function", "cc": "Cellular component"}
DEFAULT_MAX_TERMS = {"bp": 15, "mf": 8, "cc": 5}
ORG_TABLES = ("gene_info", "alias", "genetype", "go_bp", "go_mf", "go_cc")
# "ND" (no biological data) annotates a gene to the ontology's root term: it says nothing about the gene
UNINFORMATIVE_EVIDENCE = "ND"
# GO's experimental evidence codes; terms are listed experimental first, then other curated, then
# electronic (IEA), so the per-ontology caps keep the best-supported terms
EXPERIMENTAL_EVIDENCE = frozenset({"EXP", "IDA", "IPI", "IMP", "IGI", "IEP", "HTP", "HDA", "HMP", "HGI", "HEP"})


@dataclass(frozen=True)
class SymbolMap:
    """Dataset gene symbol → org.Hs.eg ``_id`` for the symbols that map, in dataset order."""

    ids: dict[str, int]
    n_symbol: int  # matched an official symbol
    n_alias: int  # matched through an alias that names exactly one gene


def open_annotation(org_path: str | os.PathLike, go_path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """Open org.Hs.eg.sqlite read-only, with GO.sqlite attached as schema ``go`` when given."""
    db = sqlite3.connect(_read_only_uri(org_path), uri=True)
    _require_tables(db, "main", ORG_TABLES, org_path, "org.Hs.eg.db")
    if go_path is not None:
        db.execute("ATTACH DATABASE ? AS go", (_read_only_uri(go_path),))
        _require_tables(db, "go", ("go_term",), go_path, "GO.db")
    return db


def _read_only_uri(path: str | os.PathLike) -> str:
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file")
    return Path(path).resolve().as_uri() + "?mode=ro"


def _require_tables(db: sqlite3.Connection, schema: str, tables: Iterable[str], path, kind: str) -> None:
    try:
        present = {name for (name,) in db.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as err:
        raise ValueError(f"{path}: not a readable SQLite file ({err})") from err
    missing = [table for table in tables if table not in present]
    if missing:
        raise ValueError(f"{path}: not an {kind} SQLite file (missing tables {missing})")


def map_symbols(db: sqlite3.Connection, genes: Sequence[str]) -> SymbolMap:
    """Official symbol first; otherwise an alias, when that alias names exactly one gene.

    A few official symbols name several genes (e.g. HBD: the globin and a disease locus); the
    protein-coding one wins, then the lowest key, so the choice is deterministic.
    """
    db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (symbol TEXT PRIMARY KEY)")
    db.execute("DELETE FROM temp.wanted")
    db.executemany("INSERT OR IGNORE INTO temp.wanted VALUES (?)", ((gene,) for gene in genes))
    by_symbol = defaultdict(list)
    for symbol, key, gene_type in db.execute(
        "SELECT i.symbol, i._id, t.gene_type FROM gene_info i JOIN temp.wanted w ON w.symbol = i.symbol"
        " LEFT JOIN genetype t ON t._id = i._id"
    ):
        by_symbol[symbol].append((gene_type != "protein-coding", key))
    by_alias = defaultdict(set)
    for alias, key in db.execute(
        "SELECT a.alias_symbol, a._id FROM alias a JOIN temp.wanted w ON w.symbol = a.alias_symbol"
    ):
        by_alias[alias].add(key)
    ids, n_symbol, n_alias = {}, 0, 0
    for gene in genes:
        if gene in by_symbol:
            ids[gene] = min(by_symbol[gene])[1]
            n_symbol += 1
        elif len(by_alias.get(gene, ())) == 1:
            (ids[gene],) = by_alias[gene]
            n_alias += 1
    return SymbolMap(ids=ids, n_symbol=n_symbol, n_alias=n_alias)


def _select_genes(db: sqlite3.Connection, keys: Iterable[int]) -> None:
    """Hold the gene keys later queries join against (a temp table: the databases stay read-only)."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS keys (_id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM temp.keys")
    db.executemany("INSERT OR IGNORE INTO temp.keys VALUES (?)", ((key,) for key in keys))


def _annotations(db: sqlite3.Connection, ontology: str, with_terms: bool) -> list[tuple]:
    """Rows (_id, go_id, evidence[, term]) of one ontology for the selected genes, informative evidence only."""
    term = ", t.term" if with_terms else ""
    join = " JOIN go.go_term t ON t.go_id = a.go_id" if with_terms else ""
    return db.execute(
        f"SELECT a._id, a.go_id, a.evidence{term} FROM go_{ontology} a JOIN temp.keys k ON k._id = a._id{join}"
        " WHERE a.evidence != ?",
        (UNINFORMATIVE_EVIDENCE,),
    ).fetchall()


def _evidence_rank(evidence: str) -> int:
    return 0 if evidence in EXPERIMENTAL_EVIDENCE else 2 if evidence == "IEA" else 1


def describe_genes(
    db: sqlite3.Connection, symbols: SymbolMap, max_terms: Mapping[str, int] = DEFAULT_MAX_TERMS
) -> dict[str, str]:
    """Per mapped dataset gene: "SYMBOL: full name. Biological process: a; b. Molecular function: …."

    Needs GO.db attached (``open_annotation(org, go)``). Per ontology at most ``max_terms[ontology]``
    terms, ordered by evidence (experimental, curated, electronic), then GO id.
    """
    _select_genes(db, symbols.ids.values())
    names = {
        key: (symbol, name)
        for key, symbol, name in db.execute(
            "SELECT i._id, i.symbol, i.gene_name FROM gene_info i JOIN temp.keys k ON k._id = i._id"
        )
    }
    sections = defaultdict(list)  # _id → ["Biological process: a; b", …]
    for ontology, label in ONTOLOGIES.items():
        terms = defaultdict(dict)  # _id → {go_id: (best evidence rank, term)}
        for key, go_id, evidence, term in _annotations(db, ontology, with_terms=True):
            rank = min(_evidence_rank(evidence), terms[key].get(go_id, (2,))[0])
            terms[key][go_id] = (rank, term)
        for key, by_go_id in terms.items():
            ordered = sorted(by_go_id.items(), key=lambda item: (item[1][0], item[0]))[: max_terms[ontology]]
            if ordered:
                sections[key].append(f"{label}: {'; '.join(term for _, (_, term) in ordered)}")
    texts = {}
    for gene, key in symbols.ids.items():
        symbol, name = names[key]
        texts[gene] = " ".join([f"{symbol}: {name}."] + [f"{section}." for section in sections[key]])
    return texts


def go_incidence(db: sqlite3.Connection, symbols: SymbolMap, ontologies: Sequence[str] = tuple(ONTOLOGIES)):
    """Binary gene × GO-term matrix (scipy CSR) for the mapped genes, rows in dataset order.

    Returns (genes, go_ids, matrix); columns are the GO ids any of these genes is annotated to, sorted.
    """
    import numpy as np
    import scipy.sparse as sp

    genes = list(symbols.ids)
    rows_of = defaultdict(list)  # two dataset symbols can map to one gene (a symbol and its alias)
    for row, gene in enumerate(genes):
        rows_of[symbols.ids[gene]].append(row)
    _select_genes(db, rows_of)
    pairs = {(key, go_id) for ontology in ontologies for key, go_id, _ in _annotations(db, ontology, with_terms=False)}
    go_ids = sorted({go_id for _, go_id in pairs})
    column = {go_id: j for j, go_id in enumerate(go_ids)}
    rows = [row for key, _ in pairs for row in rows_of[key]]
    cols = [column[go_id] for key, go_id in pairs for _ in rows_of[key]]
    matrix = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(genes), len(go_ids)))
    matrix.sort_indices()
    return genes, go_ids, matrix
