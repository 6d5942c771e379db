"""Exact neighbour joining for large distance matrices, in numpy: scikit-bio's tree, faster.

scikit-bio's ``nj`` scores every pair of clusters for the least Q at each of its n − 3 joins, O(n³) in
all (5,000 leaves: ≈ 18 s). This module keeps scikit-bio's arithmetic — the same matrix layout, the
same distance, row-sum and branch-length updates, operation for operation — and replaces only that
scan by a search that scores few pairs, after the bounds of RapidNJ (Simonsen, Mailund & Pedersen
2008) on Saitou & Nei's (1987) criterion Q(a, b) = (n − 2)·d(a, b) − S(a) − S(b):

* each cluster keeps a short list of candidate partners, sorted by a key that is Q's part in that
  partner: d(a, b) − r(b), r(b) being b's mean distance S(b)/(n − 2) at some earlier join. Distances
  between live clusters never change, so a list stays right; it only loses the clusters joined since.
* the r's drift from the current means; the least drift over the live clusters makes every key a
  lower bound of Q in one vectorised pass. A cluster whose first live entry bounds Q above the best Q
  found so far is skipped whole; a cluster whose list ends under that bound has its whole row scored
  and its list remade. When scoring has cost about as much as remaking every list, all are remade
  with fresh r's (the bounds loosen as the means drift).
* every pair of live clusters is covered: the cluster whose list was made later saw the other one,
  so the pair is in that list or lies past its end (its key at least the list's last key).

Every pair the bounds do not rule out is scored exactly, with scikit-bio's rounding, so the pair joined
is the one of least Q, and from a tie-free input the tree is scikit-bio's, with its branch lengths bit
for bit (the same operations on the same numbers). Ties: among pairs of exactly equal Q the lowest
(slot, slot) in scikit-bio's matrix layout is joined, as its row-major scan does; Q values that differ
by rounding error only (≲ 1e-15 relative) are near-ties that scikit-bio, which compares partial sums,
may resolve the other way. On integer-valued, heavily tied matrices the trees have matched
scikit-bio's in every case tried (tests/unit/lineage/test_fast_nj.py).

Cost: one float64 copy of the matrix (n² · 8 bytes) and lists of LIST_SIZE entries per cluster;
O(n²) time for scikit-bio's updates and for each remake of the lists; per join a few vectorised passes
over the live clusters plus the lists and rows the bounds keep. On random Euclidean points: ≈ 2 s at
5,000 leaves. Inputs whose Q values are all nearly equal (a star) defeat the bounds and approach O(n³).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from celldag.lineage.tree import Tree

LIST_SIZE = 16  # nearest clusters kept per cluster: longer lists mean fewer full-row scans, more gathers
DENSE_AT_MOST = 256  # with this many clusters left, the whole Q matrix is scored each join (cheap there)
REMAKE_COST = 0.25  # remake all lists once the entries scored since the last remake reach this many times n²
_BLOCK_ROWS = 256  # rows checked or listed at a time over the whole matrix (bounds the temporaries)


def neighbor_joining(distances: np.ndarray, names: Sequence[str]) -> Tree:
    """Unrooted NJ tree of ``distances`` over ``names``: scikit-bio's ``nj`` tree (root a trifurcation,
    negative branch lengths set to 0), as celldag.lineage.reconstruct converts it."""
    names = [str(name) for name in names]
    if len(names) != np.shape(distances)[0]:
        raise ValueError(f"{len(names)} names for a distance matrix of shape {np.shape(distances)}")
    if len(set(names)) != len(names):
        raise ValueError("names must be unique")
    return tree_from_linkage(nj_linkage(distances), names)


def nj_linkage(distances: np.ndarray, list_size: int | None = None) -> np.ndarray:
    """scikit-bio's NJ linkage matrix ((n − 1) × 4: cluster, cluster, their branch lengths; the last
    row holds the third child of the trifurcating root) of a symmetric, hollow distance matrix.
    Clusters are numbered as scikit-bio's: leaves 0..n − 1 in row order, then n, n + 1, … as made."""
    list_size = LIST_SIZE if list_size is None else list_size
    dm = _checked(distances)
    N = n = dm.shape[0]
    sums = dm.sum(axis=0)
    idxs = np.arange(N)
    lm = np.empty((N - 1, 4), dtype=np.float64)
    search = _PrunedSearch(dm, idxs, list_size) if N > DENSE_AT_MOST else None
    while n > 3:
        dm_, sums_, idxs_ = dm[:n, :n], sums[:n], idxs[:n]
        i, j = _dense_pair(dm_, sums_) if search is None else search.pair(n, sums_)
        joined = idxs_[i], idxs_[j]
        # from here to the end of the loop: scikit-bio 0.7's _nj, step for step
        d_ij_ = dm[i, j] / 2
        dm_[i] += dm_[j]
        dm_[i] /= 2
        delta_ = (sums_[i] - sums_[j]) / (2 * n - 4)
        L_i = d_ij_ + delta_
        L_j = d_ij_ - delta_
        sums_[:] -= dm_[i]
        sums_[:] -= d_ij_
        dm_[i] -= d_ij_
        dm_[:, i] = dm_[i]
        n_1 = n - 1
        dm_[j] = dm_[n_1]
        dm_[:, j] = dm_[:, n_1]
        sums_[j] = sums_[n_1]
        sums_[i] = dm_[i, :n_1].sum()
        lm[N - n] = idxs_[i], idxs_[j], L_i, L_j
        idxs_[i] = 2 * N - n
        idxs_[j] = idxs_[n_1]
        n -= 1
        if search is not None:
            if n > DENSE_AT_MOST:
                search.joined(i, j, n, sums[:n], joined, idxs_[j] if j < n else -1)
            else:
                search = None
    L_0 = (dm[0, 1] + dm[0, 2] - dm[1, 2]) / 2
    lm[N - 3] = idxs[1], idxs[2], dm[0, 1] - L_0, dm[0, 2] - L_0
    lm[N - 2] = idxs[0], 2 * N - 3, L_0, 0
    return lm


def tree_from_linkage(lm: np.ndarray, names: Sequence[str]) -> Tree:
    """The Tree that reconstruct.neighbor_joining makes of scikit-bio's tree for linkage ``lm``: nodes
    in preorder, children in scikit-bio's order, negative lengths 0, the root's length NaN."""
    N = len(names)
    if lm.shape != (N - 1, 4):
        raise ValueError(f"a linkage of {N} leaves has {N - 1} rows, got shape {lm.shape}")
    root = 2 * N - 2
    children: list[tuple[int, ...]] = [()] * (2 * N - 1)
    lengths = np.full(2 * N - 1, np.nan)
    for k in range(N - 3):  # internal node N + k joins the row's two clusters
        a, b = int(lm[k, 0]), int(lm[k, 1])
        children[N + k] = (a, b)
        lengths[a], lengths[b] = lm[k, 2], lm[k, 3]
    first, (second, third) = int(lm[N - 2, 0]), (int(lm[N - 3, 0]), int(lm[N - 3, 1]))
    children[root] = (first, second, third)
    lengths[first], lengths[second], lengths[third] = lm[N - 2, 2], lm[N - 3, 2], lm[N - 3, 3]
    lengths = np.where(lengths >= 0, lengths, 0.0)  # scikit-bio's neg_as_zero (NaN too)
    lengths[root] = np.nan
    order, parents = [], []
    stack = [(root, -1)]
    while stack:
        node, parent = stack.pop()
        parents.append(parent)
        index = len(order)
        order.append(node)
        stack.extend((child, index) for child in reversed(children[node]))
    order_array = np.array(order, dtype=np.int64)
    labels = tuple(names[node] if node < N else "" for node in order)
    return Tree(parent=np.array(parents, dtype=np.int64), length=lengths[order_array], names=labels)


def _checked(distances: np.ndarray) -> np.ndarray:
    """A float64 C-ordered copy of ``distances``, which must be as scikit-bio's DistanceMatrix wants."""
    dm = np.array(distances, dtype=np.float64, order="C", copy=True)
    if dm.ndim != 2 or dm.shape[0] != dm.shape[1]:
        raise ValueError(f"distances must be a square matrix, got shape {dm.shape}")
    if dm.shape[0] < 3:
        raise ValueError("Distance matrix must be at least 3x3 to generate a tree.")
    for start in range(0, dm.shape[0], _BLOCK_ROWS):  # by blocks: no n × n temporaries
        rows = dm[start : start + _BLOCK_ROWS]
        if not np.isfinite(rows).all() or (rows != dm[:, start : start + _BLOCK_ROWS].T).any():
            raise ValueError("Data must be symmetric and finite (no NaNs or infinities).")
    if np.trace(dm) != 0:
        raise ValueError("Data must  be hollow (i.e., the diagonal can only contain zeros).")
    return dm


def _dense_pair(dm_: np.ndarray, sums_: np.ndarray) -> tuple[int, int]:
    """scikit-bio's search over all pairs, its rows' minima vectorised."""
    n = dm_.shape[0]
    q_plus = dm_ * (n - 2.0)
    q_plus -= sums_[None, :]
    q_plus[np.tri(n, dtype=bool)] = np.inf  # pairs i < j only
    q_plus = q_plus[:-1]  # the last row has no pair
    return _scan(np.arange(n - 1), q_plus.min(axis=1), q_plus.argmin(axis=1), sums_)


def _scan(rows: np.ndarray, row_min: np.ndarray, row_arg: np.ndarray, sums_: np.ndarray) -> tuple[int, int]:
    """The pair scikit-bio's nj_minq_cy picks, from each row i's least q⁺ = d(i, j)·(n − 2) − S(j) over
    j > i (``row_min``, first reached at j = ``row_arg``), for rows in increasing order: it takes row i's
    when q⁺ < min_q + S(i) and then sets min_q = q⁺ − S(i), rounding both as it does (Python floats
    are IEEE doubles, as its C ones). Exact ties go to the lowest (i, j); values that differ by rounding
    only go as in scikit-bio. Rows left out must hold no pair near the least Q."""
    best, min_q = (-1, -1), float("inf")
    for i, q, j, s in zip(rows.tolist(), row_min.tolist(), row_arg.tolist(), sums_[rows].tolist()):
        if q < min_q + s:
            min_q, best = q - s, (i, j)
    return best


def _slack(best: float, scale: float) -> float:
    """A margin over the least Q found, ``best``, far above the rounding error of Q values and their
    bounds (terms up to ``scale``) and far below real differences; infinite while nothing is found."""
    return 1e-9 * (abs(best) + scale)


def _q(d: np.ndarray, n2: float, sums: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Q of pairs of slots (a, b) at distance d, as (d·(n − 2) − S(high slot)) − S(low slot): the
    same float whichever slot comes first, and scikit-bio's rounding."""
    return (d * n2 - sums[np.maximum(a, b)]) - sums[np.minimum(a, b)]


class _PrunedSearch:
    """Candidate lists per slot of the matrix, and the bounded search for the pair to join.

    Write s(c) = S(c) / (n − 2) for a cluster c's row sum over the n live clusters, so that
    Q(a, b) = (n − 2)·(d(a, b) − s(b)) − S(a). Each cluster c has a fixed reference r(c) (its s when
    the lists were last all remade, or when it was made), and a's list holds the clusters b of least
    key d(a, b) − r(b), sorted by key. Then d(a, b) − s(b) = key + (r(b) − s(b)) ≥ key + drift, with
    drift the least r − s over the live clusters, which bounds Q over the rest of a list from any
    position of it. The s move as clusters are joined and the bounds loosen: all lists are remade,
    with new references, once scoring since the last remake has cost about as much as a remake.

    Lists hold cluster ids (slots are reused as clusters are joined and moved). Per slot: ``head``,
    the list's first entry not known to be joined (``size``: none left), with its key, distance and
    cluster (past the end: the last key, an infinite distance and a cluster id that is never live).
    """

    def __init__(self, dm: np.ndarray, idxs: np.ndarray, size: int):
        N = dm.shape[0]
        self.dm = dm
        self.slot_ids = idxs  # nj_linkage's: the cluster in each slot, kept up to date by it
        # the lists are remade over at least DENSE_AT_MOST + 1 live slots: that many others exist
        self.size = size = max(1, min(size, N - 1, DENSE_AT_MOST))
        self.key = np.empty((N, size))
        self.dist = np.empty((N, size))
        self.ids = np.empty((N, size), dtype=np.int64)
        self.head = np.zeros(N, dtype=np.int64)
        self.head_key = np.empty(N)
        self.head_dist = np.empty(N)
        self.head_id = np.empty(N, dtype=np.int64)
        self.ref = np.empty(N)  # each slot's cluster's reference
        self.nobody = 2 * N - 1  # a cluster id that is never live
        self.alive = np.zeros(2 * N, dtype=bool)
        self.alive[:N] = True
        self.slot_of = np.zeros(2 * N, dtype=np.int64)
        self.slot_of[:N] = np.arange(N)
        self.stats = {"rows scored": 0, "rows scanned": 0, "remakes": 0}
        self.remake_all(N, dm.sum(axis=0))

    def remake_all(self, n: int, sums_: np.ndarray) -> None:
        """New references (the clusters' s now) and new lists for the ``n`` live slots."""
        self.ref[:n] = sums_[:n] / (n - 2.0)
        self.spent = 0.0
        self.stats["remakes"] += 1
        for start in range(0, n, _BLOCK_ROWS):
            stop = min(start + _BLOCK_ROWS, n)
            self._fill(np.arange(start, stop), self.dm[start:stop, :n], n)

    def _fill(self, slots: np.ndarray, rows: np.ndarray, n: int) -> None:
        """(Re)make the lists of ``slots`` from their matrix ``rows`` over the ``n`` live slots: the
        ``size`` clusters of least key, least first."""
        keys = rows - self.ref[:n]
        keys[np.arange(len(slots)), slots] = np.inf  # not itself
        least = np.argpartition(keys, self.size - 1, axis=1)[:, : self.size]
        key = np.take_along_axis(keys, least, axis=1)
        order = np.argsort(key, axis=1, kind="stable")
        least = np.take_along_axis(least, order, axis=1)
        self.key[slots] = key = np.take_along_axis(key, order, axis=1)
        self.dist[slots] = dist = np.take_along_axis(rows, least, axis=1)
        self.ids[slots] = ids = self.slot_ids[least]
        self.head[slots] = 0
        self.head_key[slots], self.head_dist[slots], self.head_id[slots] = key[:, 0], dist[:, 0], ids[:, 0]

    def _fill_one(self, slot: int, n: int) -> None:
        """_fill of one slot, without the 2-D indexing."""
        keys = self.dm[slot, :n] - self.ref[:n]
        keys[slot] = np.inf
        least = np.argpartition(keys, self.size - 1)[: self.size]
        least = least[np.argsort(keys[least], kind="stable")]
        self.key[slot] = keys[least]
        self.dist[slot] = self.dm[slot, least]
        self.ids[slot] = self.slot_ids[least]
        self.head[slot] = 0
        self.head_key[slot], self.head_dist[slot] = self.key[slot, 0], self.dist[slot, 0]
        self.head_id[slot] = self.ids[slot, 0]

    def _advance(self, slots: np.ndarray) -> None:
        """Move the heads of ``slots`` past the clusters joined since."""
        size = self.size
        live = self.alive[self.ids[slots]] & (np.arange(size) >= self.head[slots, None])
        found = live.any(axis=1)
        head = np.where(found, live.argmax(axis=1), size - 1)
        self.head[slots] = np.where(found, head, size)
        self.head_key[slots] = self.key[slots, head]  # past the end: the last key
        self.head_dist[slots] = np.where(found, self.dist[slots, head], np.inf)
        self.head_id[slots] = np.where(found, self.ids[slots, head], self.nobody)

    def pair(self, n: int, sums_: np.ndarray) -> tuple[int, int]:
        """The slots (i < j) of the pair that scikit-bio's scan joins among the ``n`` live slots: of
        least Q; between ties, the first it reaches (see _scan)."""
        size, last = self.size, self.size - 1
        scale = 2 * np.abs(sums_).max()
        n2 = n - 2.0
        stale = np.flatnonzero(~self.alive[self.head_id[:n]] & (self.head[:n] < size))
        if stale.size:
            self._advance(stale)
        drift = (self.ref[:n] - sums_ / n2).min()
        slots = np.arange(n)
        bound = (self.head_key[:n] + drift) * n2 - sums_
        head_q = _q(self.head_dist[:n], n2, sums_, slots, self.slot_of[self.head_id[:n]])
        best = head_q.min()
        # every pair with Q ≤ best + slack is scored (its cluster's bound is under best + 2·slack, and
        # slack ≫ the rounding error of bounds and Q), and scikit-bio's pick is one of them
        keep = np.flatnonzero(bound <= best + 2 * _slack(best, scale))
        ids = self.ids[keep]
        partners = self.slot_of[ids]
        q = _q(self.dist[keep], n2, sums_, keep[:, None], partners)
        q[~self.alive[ids]] = np.inf
        best = min(best, q.min())
        found = [(keep[:, None], partners, self.dist[keep], q)]
        # past a list's end its last key bounds the rest: the other clusters' keys were no less
        past = keep[(self.key[keep, last] + drift) * n2 - sums_[keep] <= best + 2 * _slack(best, scale)]
        self.spent += keep.size * size
        if past.size:  # lists that run out under the bound: score the whole rows, remake the lists
            self.spent += past.size * n
            self.stats["rows scanned"] += past.size
            rows = self.dm[past, :n]
            q_rows = _q(rows, n2, sums_, past[:, None], slots[None, :])
            q_rows[np.arange(past.size), past] = np.inf
            best = min(best, q_rows.min())
            found.append((past[:, None], slots[None, :], rows, q_rows))
            self._fill(past, rows, n)
        self.stats["rows scored"] += keep.size
        # the pairs within rounding of the least Q, as (low slot, high slot, q⁺), in scikit-bio's order
        low, high, q_plus = [], [], []
        for a, b, dist, values in found:
            near = values <= best + _slack(best, scale)
            a, b, dist = (np.broadcast_to(x, values.shape)[near] for x in (a, b, dist))
            low.append(np.minimum(a, b)), high.append(np.maximum(a, b))
            q_plus.append(dist * n2 - sums_[high[-1]])
        low, high, q_plus = np.concatenate(low), np.concatenate(high), np.concatenate(q_plus)
        if low.size == 1:
            return int(low[0]), int(high[0])
        order = np.lexsort((high, q_plus, low))  # by row, then q⁺, then column: each row's pick first
        low, high, q_plus = low[order], high[order], q_plus[order]
        first = np.flatnonzero(np.r_[True, low[1:] != low[:-1]])
        return _scan(low[first], q_plus[first], high[first], sums_)

    def joined(self, i: int, j: int, n: int, sums_: np.ndarray, joined: tuple[int, int], moved: int) -> None:
        """Slots i < j were joined into the cluster now in slot i; the last slot's cluster ``moved``
        went to slot j (-1: j was the last slot); ``n`` slots are live, with row sums ``sums_``."""
        self.alive[list(joined)] = False
        self.slot_of[list(joined)] = 0  # any live slot: their entries are scored, then masked
        if moved >= 0:
            per_slot = (self.key, self.dist, self.ids, self.ref, self.head, self.head_key, self.head_dist)
            for array in (*per_slot, self.head_id):
                array[j] = array[n]
            self.slot_of[moved] = j
        new = self.slot_ids[i]
        self.alive[new] = True
        self.slot_of[new] = i
        if self.spent > REMAKE_COST * n * n:
            self.remake_all(n, sums_)
        else:
            self.ref[i] = sums_[i] / (n - 2.0)
            self._fill_one(i, n)
