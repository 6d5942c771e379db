"""CellTreeQM's ``run``: reveal what the setting allows, train the encoder, embed, rebuild the tree by NJ.

Departures from the official code, each on purpose (spec Part B): fresh uniform quartets every step
(B1), training steps always in train mode (B2, ``celldag.training``), the margin sign of the paper
(B3, switchable), a true label-free setting (B5), exact HLP quartets (B6), model selection on a
validation split of the training information instead of the test RF / full-tree RF (B7), every
setting trained on the training replicate (B8), and the gate penalty actually added (B12).
All leaves are embedded together in every step (their features are known at test time too); the
setting only restricts which quartets supervise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from celldag import training
from celldag.lineage.reconstruct import euclidean_distances, reconstruct
from celldag.lineage.supervision import (
    clade_distances,
    clade_labels,
    partially_labelled_split,
    random_quartets,
    sample_known_quartets,
    supervised_quartets,
)
from celldag.lineage.track import LineageInput
from celldag.lineage.tree import parse_newick, path_distances, prune, to_newick
from celldag.methods import MethodResult
from celldag.methods.celltreeqm.losses import (
    additivity_loss,
    distance_preservation_loss,
    embedding_distances,
    pair_sums,
    quadruplet_loss,
    triplet_loss,
)
from celldag.methods.celltreeqm.model import CellTreeQMEncoder

LOSSES = ("additivity", "triplet", "quadruplet")
SETTINGS = ("supervised", "high_level_partition", "partially_labelled", "label_free")

# (count, rng, excluded leaves) → (quartets, target pairing per quartet)
Sampler = Callable[[int, np.random.Generator, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Supervision:
    """What a setting reveals, reduced to what training needs."""

    uns: dict  # the setting's facts for evaluation (result uns["supervision"])
    known_leaves: np.ndarray | None  # leaves with a known place in the tree; None when label-free
    sample: Sampler | None  # draws quartets with known topology; None when label-free
    rank: np.ndarray | None = None  # quartet positions in ascending rank (quartet_order: sorted), else random


def reveal(inputs: LineageInput, params: dict, seed: int, rank: np.ndarray | None = None) -> Supervision:
    """Reduce the true tree to what ``params["setting"]`` allows; nothing else of the tree leaves here.

    ``rank``: quartet positions in ascending rank instead of random ones (``quartet_order: sorted``).
    """
    setting, names, n = params["setting"], list(inputs.names), len(inputs.names)
    order = {"quartet_order": params["quartet_order"]}
    if setting == "label_free":
        return Supervision({"setting": setting} | order, None, None, rank)
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    if inputs.tree_newick is None:
        raise ValueError(
            f"setting {setting!r} learns from the true tree, which the runner withholds from a method whose "
            "registry entry does not list `needs: [supervision]`"
        )
    tree = parse_newick(inputs.tree_newick)

    if setting == "high_level_partition":
        level = params["level"]
        labels, clade_dist = clade_labels(tree, names, level), clade_distances(tree, names, level)

        def sample_known(count, rng, excluded):
            return sample_known_quartets(labels, clade_dist, count, rng, exclude_leaves=excluded, rank=rank)

        return Supervision({"setting": setting, "level": level} | order, labels >= 0, sample_known, rank)

    if setting == "supervised":
        known, uns = np.ones(n, dtype=bool), {"setting": setting}
        distances = path_distances(tree, names, topology_only=True)
    else:  # partially_labelled: the tree pruned to the known leaves; the rest stays unknown (nan)
        known = partially_labelled_split(n, params["known_fraction"], seed)
        known_names = [names[i] for i in np.flatnonzero(known)]
        uns = {"setting": setting, "known_leaves": known_names}
        distances = np.full((n, n), np.nan)
        distances[np.ix_(known, known)] = path_distances(prune(tree, known_names), known_names, topology_only=True)

    def sample_supervised(count, rng, excluded):
        return supervised_quartets(distances, count, rng, allowed_leaves=known & ~excluded, rank=rank)

    return Supervision(uns | order, known, sample_supervised, rank)


def metric_loss(params: dict) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """The quartet loss that tells the methods apart: (distances, quartets, target pairing) → loss."""
    loss = params["loss"]
    if loss == "additivity":
        return lambda d, q, t: additivity_loss(
            pair_sums(d, q), t, margin=params["margin"], margin_sign=params["margin_sign"], select=params["select"]
        )
    if loss == "triplet":
        return lambda d, q, t: triplet_loss(d, q, t, margin=params["margin"])
    if loss == "quadruplet":  # α = β = 0.5, hard-coded in the official trainer too
        return lambda d, q, t: quadruplet_loss(d, q, t)
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


def build_model(n_features: int, params: dict) -> CellTreeQMEncoder:
    return CellTreeQMEncoder(
        n_features,
        proj_dim=params["proj_dim"],
        hidden_dim=params["hidden_dim"],
        n_layers=params["n_layers"],
        n_heads=params["n_heads"],
        output_dim=params["output_dim"],
        dropout_data=params["dropout_data"],
        dropout_metric=params["dropout_metric"],
        norm=params["norm"],
        gate=params["gate"],
    )


@dataclass(frozen=True)
class Validation:
    """What model selection scores: fixed known quartets on one matrix of the leaves."""

    features: np.ndarray  # (n, p) the matrix validated on: the training replicate or a validation replicate
    draw: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]  # rng → (quartets, topology), drawn once
    excluded: np.ndarray  # (n,) leaves no training quartet may hold (the held-out ones; none for a replicate)


def hold_out(supervision: Supervision, n_leaves: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Validation leaves: a ``fraction`` of the leaves with a known place, never in a training quartet.

    The fallback without a validation replicate: model selection uses these, i.e. training information
    only; the official code selected on the test replicate's RF (B7).
    """
    held_out = np.zeros(n_leaves, dtype=bool)
    known = np.flatnonzero(supervision.known_leaves)
    held_out[rng.choice(known, size=int(known.size * fraction), replace=False)] = True
    return held_out


def held_out_validation(supervision: Supervision, train_x: np.ndarray, held_out: np.ndarray, count: int) -> Validation:
    """Selection on held-out leaves: ``count`` known quartets of the training replicate, each holding at
    least one held-out leaf."""
    nothing_excluded = np.zeros_like(held_out)

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        quartets, topologies, have = [], [], 0
        while have < count:
            drawn, topology = supervision.sample(count, rng, nothing_excluded)
            holds = held_out[drawn].any(axis=1)
            quartets.append(drawn[holds])
            topologies.append(topology[holds])
            have += int(holds.sum())
        return np.concatenate(quartets)[:count], np.concatenate(topologies)[:count]

    return Validation(train_x, draw, held_out)


def replicate_validation(
    supervision: Supervision, validation_x: np.ndarray, measured: np.ndarray, count: int
) -> Validation:
    """Selection on a validation replicate: ``count`` known quartets of its measured leaves, scored on
    that replicate: what the test measures (the same leaves, new cells), never the test replicate itself."""
    return Validation(validation_x, lambda rng: supervision.sample(count, rng, ~measured), np.zeros_like(measured))


def qdist_of(model: CellTreeQMEncoder, features: torch.Tensor, quartets: np.ndarray, topology: np.ndarray):
    """Validation: the fraction of ``quartets`` whose topology in the embedding of ``features`` is wrong."""
    quartets = torch.as_tensor(quartets, device=features.device)
    topology = torch.as_tensor(topology, device=features.device)

    def qdist() -> float:
        with training.autocast(features.device):
            embedding = model(features)
        estimated = pair_sums(embedding_distances(embedding.float()), quartets).argmin(dim=1)
        return (estimated != topology).float().mean().item()

    return qdist


def optimizer_for(model: CellTreeQMEncoder, params: dict) -> torch.optim.Optimizer:
    """AdamW. ``gate_lr`` (None = the shared lr, the paper's behaviour) gives the feature gate its own
    learning rate and no weight decay.

    With the shared lr (1e-3) Adam moves a sigmoid gate logit by at most ~lr per step, so in a few
    hundred steps a gate cannot leave its start σ(1) ≈ 0.73: the gate stays inert.
    """
    gate_lr, device = params["gate_lr"], next(model.parameters()).device
    if gate_lr is None or model.gate is None:
        return training.adamw(model.parameters(), device, lr=params["lr"], weight_decay=params["weight_decay"])
    gate_ids = {id(p) for p in model.gate.parameters()}
    groups = [
        {"params": [p for p in model.parameters() if id(p) not in gate_ids]},
        {"params": list(model.gate.parameters()), "lr": gate_lr, "weight_decay": 0.0},
    ]
    return training.adamw(groups, device, lr=params["lr"], weight_decay=params["weight_decay"])


# auto: the validation replicate where the dataset has one, else held-out leaves (selection_used)
SELECTIONS = ("auto", "validation_replicate", "holdout_refit", "none")
QUARTET_ORDERS = ("shuffled", "sorted")
LEAF_ORDERS = ("given", "relabelled")


def run(inputs: LineageInput, params: dict, seed: int) -> MethodResult:
    """Train on the canonical leaf order (by name), embed, map back to the given rows, rebuild the tree.

    Every computation runs on the leaves sorted by name, so the result does not depend on the order
    the rows came in: only ``quartet_order: sorted`` reads that order (``leaf_order: relabelled``
    replaces it by a seeded random one: the leaf-order control).
    """
    setting = params["setting"]
    if setting == "label_free" and params["loss"] != "additivity":
        raise ValueError(f"the {params['loss']} loss needs target topologies, which label_free does not have")
    for name, allowed in (("selection", SELECTIONS), ("quartet_order", QUARTET_ORDERS), ("leaf_order", LEAF_ORDERS)):
        if params[name] not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {params[name]!r}")
    order = np.argsort(np.asarray(inputs.names), kind="stable")
    canonical = LineageInput(
        names=tuple(inputs.names[i] for i in order),
        features=inputs.features[order],
        train_features=None if inputs.train_features is None else inputs.train_features[order],
        tree_newick=inputs.tree_newick,
        work_dir=inputs.work_dir,
        validation_features=None if inputs.validation_features is None else inputs.validation_features[order],
        validation_leaves=None if inputs.validation_leaves is None else inputs.validation_leaves[order],
        no_validation=inputs.no_validation,
    )
    embedded, facts = fit_and_embed(canonical, params, seed, quartet_rank(order, params, seed))
    notes = [note for note in (facts.pop("note", None), ordering_note(params)) if note]
    if notes:
        facts["note"] = "; ".join(notes)
    embedding = np.empty_like(embedded)
    embedding[order] = embedded
    tree = reconstruct(euclidean_distances(embedding), inputs.names, params["reconstruction"])
    return MethodResult(embedding=embedding, tree_newick=to_newick(tree), uns=facts)


# the registry params this function reads: any other key is refused when the workflow is parsed
run.accepted_params = (
    "setting",
    "loss",
    "proj_dim",
    "hidden_dim",
    "n_layers",
    "n_heads",
    "output_dim",
    "dropout_data",
    "dropout_metric",
    "norm",
    "gate",
    "gate_penalty",
    "gate_penalty_kind",
    "gate_lr",
    "lr",
    "weight_decay",
    "steps",
    "quartets_per_step",
    "w_distance",
    "w_additivity",
    "margin",
    "margin_sign",
    "select",
    "level",
    "known_fraction",
    "standardize_input",
    "selection",
    "quartet_order",
    "leaf_order",
    "validation_fraction",
    "validation_quartets",
    "validate_every",
    "patience",
    "checkpoint_every",
    "checkpoint_seconds",
    "device",
    "reconstruction",
)


# the official code's settings behind its published high-level-partition curve (../shared/fidelity/README.md)
AUTHORS_PROTOCOL = {
    "proj_dim": 256,
    "hidden_dim": 256,
    "n_layers": 4,
    "n_heads": 2,
    "output_dim": 128,
    "lr": 1e-4,
    "weight_decay": 0.01,
    "quartets_per_step": 2048,
    "w_distance": 0.1,
    "w_additivity": 20.0,
    "margin_sign": "code",
    "select": "ordered_mismatch",
}
AUTHORS_STEPS = 4399


def ordering_note(params: dict) -> str | None:
    """What a reader of ``quartet_order: sorted`` results must know: the official ordering acts only with
    the "mismatched" rule, and reproduces the authors' curve only at their sizes and step budget."""
    if params["quartet_order"] != "sorted":
        return None
    if params["select"] != "ordered_mismatch":
        return "quartet_order: sorted without select: ordered_mismatch: the ordering changes nothing here"
    differs = sorted(key for key, value in AUTHORS_PROTOCOL.items() if params[key] != value)
    if differs or params["steps"] < AUTHORS_STEPS:
        return (
            "smoke-sized for the official ordering "
            f"({', '.join(differs + ['steps'] * (params['steps'] < AUTHORS_STEPS))} "
            f"differ from the authors' run): their high-level-partition curve is reproduced only at their sizes "
            f"and {AUTHORS_STEPS:,} steps (docs/celltreeqm.md)"
        )
    return None


def quartet_rank(order: np.ndarray, params: dict, seed: int) -> np.ndarray | None:
    """Per canonical leaf, the rank ``quartet_order: sorted`` sorts quartet positions by: its given row
    index, or a seeded relabelling of it; None (random positions) for ``shuffled``."""
    if params["quartet_order"] == "shuffled":
        return None
    if params["leaf_order"] == "relabelled":
        return np.random.default_rng([seed, 0x1EAF]).permutation(order.size)[order]
    return order


def standardized(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """z-score every feature with the training replicate's mean and sd (ddof 1; a constant feature is only centred)."""
    mean, sd = train.mean(axis=0), train.std(axis=0, ddof=1)
    sd = np.where(sd > 0, sd, 1.0)
    return [(matrix - mean) / sd for matrix in (train, *others)]


def selection_used(inputs: LineageInput, supervision: Supervision, params: dict) -> str:
    """The model selection a run can have: none without known leaves (label-free: nothing to validate
    against) or too few to hold any out; ``auto`` takes the validation replicate where the dataset has
    one, else held-out leaves."""
    requested = params["selection"]
    if requested == "none" or supervision.known_leaves is None:
        return "none"
    measured = None if inputs.validation_features is None else inputs.validation_leaves & supervision.known_leaves
    has_replicate = measured is not None and int(measured.sum()) >= 4
    if requested == "validation_replicate" and not has_replicate:
        raise ValueError(
            "selection: validation_replicate needs a validation replicate of 4 or more known leaves "
            "(prepared layer 'validation'); this dataset has none: use auto or holdout_refit"
        )
    if requested == "auto" and has_replicate:
        return "validation_replicate"
    if (
        requested in ("auto", "holdout_refit")
        and int(supervision.known_leaves.sum() * params["validation_fraction"]) == 0
    ):
        return "none"
    return "holdout_refit" if requested == "auto" else requested


HOLDOUT_REFIT = (
    "steps chosen on held-out leaves of the training replicate, then retrained on all leaves (selection holdout_refit)"
)
FALLBACK_NOTE = f"no validation replicate in this dataset: {HOLDOUT_REFIT}"


def fallback_note(inputs: LineageInput) -> str:
    """Why ``auto`` fell back to held-out leaves: the dataset has no validation replicate (and why, where its
    loader says), or the one it has measures too few known leaves."""
    if inputs.validation_features is not None:
        return f"the validation replicate measures fewer than 4 known leaves: {HOLDOUT_REFIT}"
    if inputs.no_validation:
        return f"no validation replicate in this dataset ({inputs.no_validation}): {HOLDOUT_REFIT}"
    return FALLBACK_NOTE


def fit_and_embed(inputs: LineageInput, params: dict, seed: int, rank: np.ndarray | None) -> tuple[np.ndarray, dict]:
    """Train with the selection the data allow (``selection_used``), embed the scored replicate.

    validation_replicate: train on all known leaves, keep the weights of the step with the lowest QDist
    on the validation replicate (no refit). holdout_refit: choose the step count on held-out leaves,
    then train on all leaves for that many steps. none: train ``steps`` steps on all leaves.
    """
    training.seed_everything(seed)
    device = training.select_device(params["device"])
    supervision = reveal(inputs, params, seed, rank)
    train_x = inputs.features if inputs.train_features is None else inputs.train_features
    scored_x, validation_x = inputs.features, inputs.validation_features
    if params["standardize_input"]:
        train_x, scored_x, *rest = standardized(train_x, scored_x, *([] if validation_x is None else [validation_x]))
        validation_x = rest[0] if rest else None
    checkpoints = None if inputs.work_dir is None else Path(inputs.work_dir) / "checkpoint"
    used, count = selection_used(inputs, supervision, params), params["validation_quartets"]
    facts = {"selection": used}
    if used == "none":
        model, result = train_encoder(train_x, supervision, params, seed, device, params["steps"], checkpoints)
        facts["steps"] = params["steps"]
    elif used == "validation_replicate":
        measured = inputs.validation_leaves & supervision.known_leaves
        validation = replicate_validation(supervision, validation_x, measured, count)
        model, result = train_encoder(
            train_x, supervision, params, seed, device, params["steps"], checkpoints, validation
        )
        facts |= {
            "steps": result.best_step,
            "validation_qdist": result.best_value,
            "validation_leaves": int(measured.sum()),
            "validated_steps_run": result.steps_run,
            "stopped_early": result.stopped_early,
        }
    else:
        held_out = hold_out(supervision, len(inputs.names), params["validation_fraction"], np.random.default_rng(seed))
        validation = held_out_validation(supervision, train_x, held_out, count)
        _, chosen = train_encoder(
            train_x,
            supervision,
            params,
            seed,
            device,
            params["steps"],
            checkpoints and checkpoints / "selection",
            validation,
        )
        validated = chosen_steps(chosen.history, count)
        steps = refit_steps(validated, int(supervision.known_leaves.sum()), int(held_out.sum()), params["steps"])
        facts |= {
            "steps": steps,
            "chosen_steps": validated,
            "validation_qdist": chosen.best_value,
            "best_validated_step": chosen.best_step,
            "validated_steps_run": chosen.steps_run,
            "stopped_early": chosen.stopped_early,
        }
        model, result = train_encoder(
            train_x, supervision, params, seed, device, steps, checkpoints and checkpoints / "refit"
        )
    model.eval()
    with torch.no_grad(), training.autocast(device):  # the scored replicate, all leaves embedded jointly
        features = torch.as_tensor(np.asarray(scored_x, dtype=np.float32), device=device)
        embedding = model(features).float().cpu().numpy().astype(np.float64)
    facts |= {"steps_run": result.steps_run, "resumed_from": result.resumed_from, "device": str(device)}
    uns = {"supervision": supervision.uns, "training": facts}
    if used == "holdout_refit" and params["selection"] == "auto":
        uns["note"] = fallback_note(inputs)
    return embedding, uns


def chosen_steps(history: list[dict], n_quartets: int) -> int:
    """The latest validated step whose QDist is within one binomial standard error of the best.

    Validation QDist on a few thousand quartets is noisy and flat near its minimum, so the single
    best step is often an early one; the refit trains on more leaves (the held-out ones too), which
    favours longer training, so among steps the validation cannot tell apart it takes the last.
    """
    validated = [(row["step"], row["val"]) for row in history if row.get("val") is not None]
    best = min(value for _, value in validated)
    tolerance = (max(best, 1 / n_quartets) * (1 - best) / n_quartets) ** 0.5
    return max(step for step, value in validated if value <= best + tolerance)


def refit_steps(chosen: int, n_known: int, n_held_out: int, budget: int) -> int:
    """The refit's step count: the chosen one, scaled to give each leaf as many quartet draws, within ``budget``.

    A step draws a fixed number of quartets, so with the held-out leaves back each leaf is drawn
    n_known / (n_known − n_held_out) times less often per step; training "the same number of epochs"
    rather than the same number of updates is the usual rule for the refit after early stopping
    (Goodfellow, Bengio & Courville, Deep Learning, §7.8, algorithm 7.2). ``budget`` (``steps``) stays
    the most the method may train.
    """
    return min(budget, max(1, round(chosen * n_known / (n_known - n_held_out))))


def train_encoder(
    train_x: np.ndarray,
    supervision: Supervision,
    params: dict,
    seed: int,
    device: torch.device,
    steps: int,
    checkpoint_dir: Path | None,
    validation: Validation | None = None,
):
    """A fresh encoder trained for ``steps``; with ``validation``, it ends with the weights of its best validated
    step."""
    training.seed_everything(seed)  # the same initial weights in the selection and the refit
    # setup draws (validation set) and step draws come from separate streams, so the checkpointed step
    # stream is the only state a resumed run must restore
    setup_rng, rng = np.random.default_rng(seed).spawn(2)
    x = torch.as_tensor(np.asarray(train_x, dtype=np.float32), device=device)
    n_leaves, n_features = x.shape
    input_distances = embedding_distances(x) / n_features**0.5  # D_X/√C: constant, computed once
    model = build_model(n_features, params).to(device)
    optimizer = optimizer_for(model, params)
    quartet_loss = metric_loss(params)
    excluded = np.zeros(n_leaves, dtype=bool) if validation is None else validation.excluded
    validate_fn = None
    if validation is not None:
        validated_x = torch.as_tensor(np.asarray(validation.features, dtype=np.float32), device=device)
        validate_fn = qdist_of(model, validated_x, *validation.draw(setup_rng))

    def draw_quartets() -> tuple[torch.Tensor, torch.Tensor | None]:
        """Fresh uniform quartets every step (the official trainer reused one fixed set, B1), drawn on the host
        from the checkpointed stream: the same quartets on CPU and GPU, and after a resume. No step waits for
        the GPU, so the host draws them while the device still runs the step before."""
        if supervision.sample is None:
            quartets = random_quartets(~excluded, params["quartets_per_step"], rng, supervision.rank)
            return training.to_device(quartets, device), None
        quartets, topology = supervision.sample(params["quartets_per_step"], rng, excluded)
        return training.to_device(quartets, device), training.to_device(topology, device)

    def step_fn(_step: int) -> dict[str, torch.Tensor]:
        quartets, target = draw_quartets()
        optimizer.zero_grad(set_to_none=True)
        with training.autocast(device):  # one forward of all training leaves
            embedding = model(x)
        distances = embedding_distances(embedding.float())
        quartet_term = quartet_loss(distances, quartets, target)
        preservation = distance_preservation_loss(distances, input_distances, embedding_dim=params["output_dim"])
        loss = params["w_additivity"] * quartet_term + params["w_distance"] * preservation
        if params["gate"] != "none":
            loss = loss + params["gate_penalty"] * model.gate_penalty(params["gate_penalty_kind"])
        loss.backward()
        optimizer.step()
        # tensors, read back only at log and validation steps (training.train)
        return {"loss": loss.detach(), "quartet": quartet_term.detach(), "preservation": preservation.detach()}

    result = training.train(
        model=model,
        optimizer=optimizer,
        step_fn=step_fn,
        total_steps=steps,
        rng=rng,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=params["checkpoint_every"],
        checkpoint_seconds=params["checkpoint_seconds"],
        validate_fn=validate_fn,
        validate_every=params["validate_every"],
        patience=params["patience"] if validate_fn is not None else None,
    )
    return model, result
