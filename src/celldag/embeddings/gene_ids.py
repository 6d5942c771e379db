"""A dataset's gene ids → the human gene symbols every gene-embedding source is keyed by.

A dataset's registry entry declares what its var_names are (``gene_ids``: ``symbol``, the default, or
``ensembl``) and its species (``species``: ``human``, the default, or ``mouse``). ``embed_genes``
(``providers``) translates here (``plan.declared_genes`` reads the declaration, ``plan.gene_table_files`` lists
the files), before any provider sees the genes, so that every provider and every
method reading its table gets the same mapping:

- human Ensembl ids → symbols through org.Hs.eg.db, the file the GO text and GO-SVD tables read
  (``map_ensembl`` gives the rule);
- other species: no orthology mapping to human genes can be had offline (Debian packages no ortholog
  table and org.Hs.eg.db holds none), so the gene table says it does not apply (``not_applicable``)
  instead of embedding the few genes whose names happen to equal a human symbol.
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# GENCODE and many h5ad files version their ids (ENSG00000141510.17); org.Hs.eg.db's ids carry no version
_VERSION = re.compile(r"\.\d+$")


def no_orthology(species: str) -> str:
    """Why a gene table does not apply to a dataset of another species than human."""
    return f"{species} genes; no offline orthology mapping to the human gene table"


@dataclass(frozen=True)
class GeneIdMap:
    """Dataset Ensembl id → symbol for the ids that map one to one, in dataset order, and what was dropped."""

    symbols: dict[str, str]
    n_without_symbol: int  # org.Hs.eg.db links the id to no gene
    n_ambiguous: int  # several genes, or a symbol already taken by another id of the dataset

    def facts(self) -> dict[str, int | str]:
        n_ids = len(self.symbols) + self.n_without_symbol + self.n_ambiguous
        return {
            "gene_ids": "ensembl",
            "n_ids": n_ids,
            "n_symbols": len(self.symbols),
            "n_without_symbol": self.n_without_symbol,
            "n_ambiguous": self.n_ambiguous,
        }


def note(facts: Mapping) -> str:
    """The leaderboard's line for a run on mapped ids, e.g. "genes: 18,204 Ensembl ids → 16,980 symbols (…)"."""
    return (
        f"genes: {facts['n_ids']:,} Ensembl ids → {facts['n_symbols']:,} symbols "
        f"({facts['n_without_symbol']:,} without a symbol, {facts['n_ambiguous']:,} ambiguous dropped)"
    )


def map_ensembl(db: sqlite3.Connection, ids: Sequence[str]) -> GeneIdMap:
    """Human Ensembl gene ids → official symbols, one to one, through org.Hs.eg.db.

    The links are the ``ensembl`` table's (NCBI's gene2ensembl, the map behind Bioconductor's ``ENSEMBL``
    keytype), a version suffix ignored. An id linked to several genes takes the protein-coding one when
    exactly one is (as ``annotation.map_symbols`` breaks ties between genes sharing a symbol), else it is
    ambiguous and dropped. A symbol reached from several ids of the dataset goes to the first of them in
    sorted order (deterministic; nothing in org.Hs.eg.db says which id is right) and the others are
    ambiguous and dropped: a symbol's vector then stands for one column of the dataset only.
    """
    db.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_ensembl (ensembl_id TEXT PRIMARY KEY)")
    db.execute("DELETE FROM temp.wanted_ensembl")
    db.executemany("INSERT OR IGNORE INTO temp.wanted_ensembl VALUES (?)", ((_VERSION.sub("", i),) for i in ids))
    genes = defaultdict(set)  # unversioned Ensembl id → {(symbol, protein-coding)}
    for ensembl_id, symbol, gene_type in db.execute(
        "SELECT e.ensembl_id, i.symbol, t.gene_type FROM ensembl e"
        " JOIN temp.wanted_ensembl w ON w.ensembl_id = e.ensembl_id JOIN gene_info i ON i._id = e._id"
        " LEFT JOIN genetype t ON t._id = e._id"
    ):
        genes[ensembl_id].add((symbol, gene_type == "protein-coding"))
    symbol_of, taken, n_without, n_ambiguous = {}, set(), 0, 0
    for gene in sorted(ids):  # sorted: a symbol several ids reach goes to the first
        linked = genes.get(_VERSION.sub("", gene), set())
        symbols = {symbol for symbol, _ in linked}
        if len(symbols) > 1:
            symbols = {symbol for symbol, coding in linked if coding}
        if not linked:
            n_without += 1
        elif len(symbols) != 1 or next(iter(symbols)) in taken:
            n_ambiguous += 1
        else:
            (symbol_of[gene],) = symbols
            taken.add(symbol_of[gene])
    return GeneIdMap({gene: symbol_of[gene] for gene in ids if gene in symbol_of}, n_without, n_ambiguous)
