"""CellTreeQM losses on embedding distances: quartet additivity, distance preservation, contrastive baselines.

Quartet pairings follow ``celldag.lineage.metrics``: for (i, j, k, l), 0 = ij|kl, 1 = ik|jl, 2 = il|jk.
In a tree metric the smallest pairing sum is the quartet's topology and the other two are equal.
"""

from __future__ import annotations

import functools

import torch

MARGIN_SIGNS = ("page", "code")
SELECTIONS = ("topology_mismatch", "ordered_mismatch", "all")
# for pairing t: (its first pair, its second pair) as quartet positions
_PAIRINGS = torch.tensor([[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 3], [1, 2]]])
# for pairing t: the other two pairings, lower index first
_OTHERS = torch.tensor([[1, 2], [0, 2], [0, 1]])


@functools.cache
def _on(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(_PAIRINGS, _OTHERS) on ``device``, copied there once instead of at every step."""
    return _PAIRINGS.to(device), _OTHERS.to(device)


def embedding_distances(embedding: torch.Tensor) -> torch.Tensor:
    """(N, N) Euclidean distances; computed from differences so the diagonal is exactly 0 with a 0 gradient."""
    return torch.cdist(embedding, embedding, compute_mode="donot_use_mm_for_euclid_dist")


def pair_sums(distances: torch.Tensor, quartets: torch.Tensor) -> torch.Tensor:
    """(Q, 3) sums of within-pair distances for the three pairings of each quartet."""
    i, j, k, l = quartets.T
    return torch.stack(
        [distances[i, j] + distances[k, l], distances[i, k] + distances[j, l], distances[i, l] + distances[j, k]],
        dim=1,
    )


def _target_sums(sums: torch.Tensor, target_topology: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(S_t, S_u, S_v) per quartet: the target pairing's sum and the other two, lower index first."""
    others = _on(sums.device)[1][target_topology]
    return tuple(sums.gather(1, column[:, None])[:, 0] for column in (target_topology, others[:, 0], others[:, 1]))


def push_hinge(sums: torch.Tensor, target_topology: torch.Tensor, margin: float, margin_sign: str) -> torch.Tensor:
    """S_t − (S_u + S_v)/2 ± m per quartet: positive where the push term acts.

    ``margin_sign`` "page" (+m, the paper's formula) asks for a gap of at least m between the target
    sum and the mean of the other two; "code" (−m, the official code's sign) asks for no gap at all.
    """
    if margin_sign not in MARGIN_SIGNS:
        raise ValueError(f"margin_sign must be one of {MARGIN_SIGNS}, got {margin_sign!r}")
    s_target, s_u, s_v = _target_sums(sums, target_topology)
    return s_target - (s_u + s_v) / 2 + (margin if margin_sign == "page" else -margin)


def select_quartets(
    sums: torch.Tensor, target_topology: torch.Tensor, hinge: torch.Tensor, select: str
) -> torch.Tensor:
    """Which quartets the additivity loss acts on (no gradient flows through the choice).

    - ``topology_mismatch``: the estimated topology is wrong, or right with the push hinge still
      active (gap below the margin). The second part is what lets +m act at all: selecting only
      wrong topologies would never push a right one past the margin.
    - ``ordered_mismatch``: the official rule, comparing the ordered positions of the two largest
      estimated sums with the reference's; the reference's tied pair is ordered lower index first.
    - ``all``: every quartet.
    """
    sums = sums.detach()
    if select == "topology_mismatch":
        return (sums.argmin(dim=1) != target_topology) | (hinge.detach() > 0)
    if select == "ordered_mismatch":
        return (sums.topk(2, dim=1).indices != _on(sums.device)[1][target_topology]).any(dim=1)
    if select == "all":
        return torch.ones(sums.shape[0], dtype=torch.bool, device=sums.device)
    raise ValueError(f"select must be one of {SELECTIONS}, got {select!r}")


def additivity_loss(
    sums: torch.Tensor,
    target_topology: torch.Tensor | None,
    *,
    margin: float = 0.1,
    margin_sign: str = "page",
    select: str = "topology_mismatch",
    w_close: float = 1.0,
    w_push: float = 30.0,
) -> torch.Tensor:
    """Four-point loss w_close·mean|S_u − S_v| + w_push·mean[S_t − (S_u + S_v)/2 ± m]_+ over selected quartets.

    t is the target pairing, u and v the other two; see :func:`push_hinge` for the margin sign and
    :func:`select_quartets` for ``select``. No quartet selected gives 0 (still attached to the graph).

    ``target_topology`` None is the label-free variant: t is the estimated smallest pairing (no
    gradient through the choice), only the closing term acts, on every quartet.
    """
    if target_topology is None:
        _, s_u, s_v = _target_sums(sums, sums.detach().argmin(dim=1))
        return w_close * (s_u - s_v).abs().mean()
    hinge = push_hinge(sums, target_topology, margin, margin_sign)
    selected = select_quartets(sums, target_topology, hinge, select)
    if sums.device.type != "cpu":
        return _masked_additivity(sums, target_topology, hinge, selected, w_close, w_push)
    # On the CPU the selected quartets are gathered first: the release's arithmetic, bit for bit.
    if not selected.any():
        return sums.sum() * 0.0
    _, s_u, s_v = _target_sums(sums[selected], target_topology[selected])
    return w_close * (s_u - s_v).abs().mean() + w_push * torch.relu(hinge[selected]).mean()


def _masked_additivity(
    sums: torch.Tensor,
    target_topology: torch.Tensor,
    hinge: torch.Tensor,
    selected: torch.Tensor,
    w_close: float,
    w_push: float,
) -> torch.Tensor:
    """The additivity loss as sums over all quartets with the unselected ones zeroed, divided by the count.

    The same means as gathering the selected quartets (up to the order of summation), but with no
    selection count read back by the host: on a GPU the step never waits for the device.
    """
    _, s_u, s_v = _target_sums(sums, target_topology)
    count = selected.sum().clamp(min=1)
    close = torch.where(selected, (s_u - s_v).abs(), 0.0).sum() / count
    push = torch.where(selected, torch.relu(hinge), 0.0).sum() / count
    return w_close * close + w_push * push


def distance_preservation_loss(
    embedding_distances: torch.Tensor, input_distances_scaled: torch.Tensor, *, embedding_dim: int
) -> torch.Tensor:
    """‖D_X/√C − D_Z/√K‖_F over the whole N×N matrix (not divided by N², as in the paper).

    ``input_distances_scaled`` is D_X/√C, computed once per dataset by the caller.
    """
    return torch.linalg.matrix_norm(input_distances_scaled - embedding_distances / embedding_dim**0.5)


def _roles(quartets: torch.Tensor, target_topology: torch.Tensor) -> torch.Tensor:
    """(Q, 4) leaves as (anchor, positive, negative, other negative) from the target topology.

    Anchor and positive are the target pair holding quartet position 0. The reference of the weak
    settings is a topology only, in which both leaves of the other pair are equally far from the
    anchor, so the negative is simply the first of them. Samplers shuffle the positions in a quartet,
    so these choices are random, not biased to some leaves.
    """
    positions = _on(quartets.device)[0][target_topology].reshape(-1, 4)
    return quartets.gather(1, positions)


def triplet_loss(
    distances: torch.Tensor, quartets: torch.Tensor, target_topology: torch.Tensor, margin: float
) -> torch.Tensor:
    """mean[D_AP − D_AN + margin]_+."""
    anchor, positive, negative, _ = _roles(quartets, target_topology).T
    return torch.relu(distances[anchor, positive] - distances[anchor, negative] + margin).mean()


def quadruplet_loss(
    distances: torch.Tensor,
    quartets: torch.Tensor,
    target_topology: torch.Tensor,
    alpha: float = 0.5,
    beta: float = 0.5,
) -> torch.Tensor:
    """mean([D_AP − D_AN + α]_+ + [D_AP − D_NN′ + β]_+)."""
    anchor, positive, negative, other = _roles(quartets, target_topology).T
    positive_pair = distances[anchor, positive]
    return (
        torch.relu(positive_pair - distances[anchor, negative] + alpha)
        + torch.relu(positive_pair - distances[negative, other] + beta)
    ).mean()
