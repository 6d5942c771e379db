"""Fit sciLaMA on arrays: the paper's stepwise 3-phase schedule or direct joint training (spec §2).

Each phase runs on ``celldag.training.train`` with one step = one minibatch, in two segments with their
own checkpoints: the KL warm-up (no validation) and then the epochs with β = 1, validated every epoch
with early stopping and best-weight reload. So selection never compares losses of different β, and a
killed run resumes bit-identically on CPU. Departures from the official code (spec §7): the
self-informed gene input holds training cells only; in phase 2 the frozen cell side runs in eval mode
(μ, no dropout), computed once per phase instead of sampled every step; validation uses μ on both
sides; the gene input is a buffer on the device, never copied per step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from celldag import training
from celldag.methods.scilama.losses import cell_vae_loss, coupled_loss, first_full_kl_epoch, kl_divergence, kl_weight
from celldag.methods.scilama.model import SciLaMA

GENE_INPUTS = ("embeddings", "self_informed", "random", "shuffled")
MODES = ("stepwise", "direct")
# phase name → which sides train; stepwise = cell, gene, joint (spec §2.5)
PHASE_TRAINS = {"cell": ("cell",), "gene": ("gene",), "joint": ("cell", "gene")}

# (cell indices, β) → loss
PhaseLoss = Callable[[torch.Tensor, float], torch.Tensor]


@dataclass(frozen=True)
class SciLaMAResult:
    cell_embedding: np.ndarray  # (cells, latent) μ^cell
    gene_embedding: np.ndarray | None  # (genes, latent) contextual μ^gene; None without the gene VAE
    phase_facts: dict  # {phase: {"epochs", "seconds", "best_epoch", "best_val", "stopped_early"}}
    device: str


def gene_input_matrix(
    expression: np.ndarray, train_mask: np.ndarray, gene_embeddings: np.ndarray | None, kind: str
) -> np.ndarray:
    """The gene VAE's input, one row per gene: the static ``embeddings``, or ``self_informed`` Xᵀ over
    training cells only (the official code used all cells, leaking validation and test cells).

    The ``random`` and ``shuffled`` controls are static vectors drawn before the fit
    (``celldag.representation.scoring.static_vectors``, which the scorer redraws), then fitted as
    ``embeddings``.
    """
    if kind == "self_informed":
        return np.ascontiguousarray(expression[train_mask].T, dtype=np.float32)
    if kind != "embeddings":
        raise ValueError(
            f"gene_input {kind!r}: fit_scilama takes 'embeddings' or 'self_informed'; the "
            "controls are drawn by static_vectors first (celldag.methods.scilama.run)"
        )
    if gene_embeddings is None:
        raise ValueError(f"gene_input {kind!r} needs gene_embeddings")
    if gene_embeddings.shape[0] != expression.shape[1]:
        raise ValueError(f"gene_embeddings has {gene_embeddings.shape[0]} rows for {expression.shape[1]} genes")
    return np.asarray(gene_embeddings, dtype=np.float32)


def one_hot(batch: np.ndarray, train_mask: np.ndarray) -> np.ndarray:
    """One column per batch code seen in training; a code seen only outside training is all zeros."""
    categories = np.unique(batch[train_mask])
    return (batch[:, None] == categories[None, :]).astype(np.float32)


def _phases(params: dict) -> list[str]:
    if params["mode"] not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {params['mode']!r}")
    if not params["use_gene_vae"]:
        return ["cell"]  # the cell VAE alone (the "no prior" baseline)
    return ["cell", "gene", "joint"] if params["mode"] == "stepwise" else ["joint"]


def _phase_loss(
    phase: str, model: SciLaMA, x: torch.Tensor, covariates: torch.Tensor | None, gamma: float
) -> PhaseLoss:
    """The loss of ``phase`` on a set of cells, at the model's current train/eval mode."""

    def cells(idx: torch.Tensor):
        return x[idx], None if covariates is None else covariates[idx]

    if phase == "cell":

        def cell_loss(idx, beta):
            target, cov = cells(idx)
            cell = model.cell_side(target, cov)
            return cell_vae_loss(target, model.cell_reconstruction(cell.h), cell.mu, cell.logvar, beta)

        return cell_loss

    if phase == "gene":
        # The cell side is frozen in this phase, so its decoder output is a constant: compute it once.
        model.eval()
        with torch.no_grad():
            h_cell = model.cell_side(x, covariates).h
        model.train()

        def gene_loss(idx, beta):
            gene = model.gene_side()
            reconstruction = model.inner_reconstruction(h_cell[idx], gene.h)
            return coupled_loss(x[idx], reconstruction, beta, kl_divergence(gene.mu, gene.logvar))

        return gene_loss

    def joint_loss(idx, beta):
        target, cov = cells(idx)
        cell, gene = model.cell_side(target, cov), model.gene_side()
        # γ = 0 skips the alignment product altogether
        alignment = model.inner_reconstruction(cell.z, gene.z) if gamma else None
        return coupled_loss(
            target,
            model.inner_reconstruction(cell.h, gene.h),
            beta,
            kl_divergence(gene.mu, gene.logvar),
            kl_divergence(cell.mu, cell.logvar),
            gamma,
            alignment,
        )

    return joint_loss


def _set_trainable(model: SciLaMA, phase: str) -> list[torch.nn.Parameter]:
    """Freeze what ``phase`` does not train (W^cell and b included, spec §2.5); return what it trains."""
    sides = {
        "cell": [model.cell_encoder, model.cell_decoder, model.cell_output],
        "gene": [model.gene_encoder, model.gene_decoder] if model.has_gene_vae else [],
    }
    trained = {id(p) for side in PHASE_TRAINS[phase] for module in sides[side] for p in module.parameters()}
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) in trained)
    return [p for p in model.parameters() if p.requires_grad]


def _train_phase(
    phase: str,
    phase_number: int,
    model: SciLaMA,
    loss_fn: PhaseLoss,
    train_idx: torch.Tensor,
    val_idx: torch.Tensor,
    params: dict,
    seed: int,
    checkpoint_dir: Path | None,
) -> dict:
    """One phase: AdamW with lr·decay^epoch, warm-up segment, then validated segment with early stopping."""
    optimizer = training.adamw(
        _set_trainable(model, phase), train_idx.device, lr=params["lr"], weight_decay=params["weight_decay"]
    )
    batch_size, n_train = params["batch_size"], len(train_idx)
    steps_per_epoch = math.ceil(n_train / batch_size)
    full_kl = first_full_kl_epoch(params["kl_warmup_epochs"], params["kl_ramp_epochs"])
    if params["max_epochs"] <= full_kl:
        raise ValueError(
            f"max_epochs ({params['max_epochs']}) must exceed warm-up + ramp ({full_kl}): selection starts once β = 1"
        )
    rng = np.random.default_rng([seed, phase_number])  # held by the checkpoints; the steps draw from torch
    epoch_order: dict[int, torch.Tensor] = {}

    def order_of(epoch: int) -> torch.Tensor:
        """A fixed shuffle per (seed, phase, epoch): a resume mid-epoch sees the same minibatches."""
        if epoch not in epoch_order:
            epoch_order.clear()
            permutation = np.random.default_rng([seed, phase_number, epoch]).permutation(n_train)
            epoch_order[epoch] = train_idx[torch.as_tensor(permutation, device=train_idx.device)]
        return epoch_order[epoch]

    def step_fn_from(first_epoch: int):
        def step_fn(step: int) -> dict[str, torch.Tensor | float]:
            epoch, batch = first_epoch + (step - 1) // steps_per_epoch, (step - 1) % steps_per_epoch
            idx = order_of(epoch)[batch * batch_size : (batch + 1) * batch_size]
            for group in optimizer.param_groups:  # stateless ExponentialLR: nothing extra to checkpoint
                group["lr"] = params["lr"] * params["lr_decay"] ** epoch
            beta = kl_weight(epoch, params["kl_warmup_epochs"], params["kl_ramp_epochs"])
            optimizer.zero_grad(set_to_none=True)
            with training.autocast(train_idx.device):
                loss = loss_fn(idx, beta)
            loss.backward()
            optimizer.step()
            return {"loss": loss.detach(), "beta": beta}  # the loss is read back only at log steps (training.train)

        return step_fn

    def validate() -> float:  # in eval mode under no_grad (training.train); β is 1 here
        # all validation cells in one pass: (validation cells × genes) activations, fine up to ~10⁴ cells
        with training.autocast(val_idx.device):
            return loss_fn(val_idx, 1.0).item()

    def segment(name: str, first_epoch: int, epochs: int, validated: bool) -> training.TrainingResult:
        return training.train(
            model=model,
            optimizer=optimizer,
            step_fn=step_fn_from(first_epoch),
            total_steps=epochs * steps_per_epoch,
            rng=rng,
            checkpoint_dir=None if checkpoint_dir is None else checkpoint_dir / name,
            checkpoint_every=params["checkpoint_every"] and params["checkpoint_every"] * steps_per_epoch,
            checkpoint_seconds=params["checkpoint_seconds"],
            validate_fn=validate if validated else None,
            validate_every=steps_per_epoch,
            patience=params["patience"] if validated else None,
            min_delta=params["min_delta"],
            log_every=steps_per_epoch,
        )

    started = time.perf_counter()
    segment(f"{phase}_warmup", 0, full_kl, validated=False)
    selection = segment(phase, full_kl, params["max_epochs"] - full_kl, validated=len(val_idx) > 0)

    def epoch_of(steps: int | None) -> int | None:
        return None if steps is None else full_kl + math.ceil(steps / steps_per_epoch) - 1

    return {
        "epochs": epoch_of(selection.steps_run) + 1,
        "seconds": time.perf_counter() - started,  # this process only: a resumed run counts the rest
        "best_epoch": epoch_of(selection.best_step),
        "best_val": selection.best_value,
        "stopped_early": selection.stopped_early,
    }


def fit_scilama(
    expression: np.ndarray,
    train_mask: np.ndarray,
    batch: np.ndarray | None,
    gene_embeddings: np.ndarray | None,
    params: dict,
    seed: int,
    work_dir: str | None,
) -> SciLaMAResult:
    """Train on the cells in ``train_mask``; the others are the validation set (early stopping and model
    selection only). ``expression``: cells × genes, scaled log-normalised. ``batch``: integer codes, used
    as one-hot covariates when ``params["use_batch"]``. Checkpoints go under ``work_dir``/checkpoint.
    """
    training.seed_everything(seed)
    device = training.select_device(params["device"])
    train_mask = np.asarray(train_mask, dtype=bool)
    if not train_mask.any():
        raise ValueError("train_mask selects no cells")

    covariates = None
    if params["use_batch"]:
        if batch is None:
            raise ValueError("use_batch needs batch codes")
        covariates = torch.as_tensor(one_hot(np.asarray(batch), train_mask), device=device)
    gene_input = None
    if params["use_gene_vae"]:
        gene_input = torch.as_tensor(
            gene_input_matrix(expression, train_mask, gene_embeddings, params["gene_input"]), device=device
        )
    x = torch.as_tensor(np.asarray(expression, dtype=np.float32), device=device)
    model = SciLaMA(
        n_genes=x.shape[1],
        n_covariates=0 if covariates is None else covariates.shape[1],
        gene_input=gene_input,
        hidden_dims=list(params["hidden_dims"]),
        gene_hidden_dims=list(params["gene_hidden_dims"]),
        latent_dim=params["latent_dim"],
        dropout=params["dropout"],
    ).to(device)
    train_idx = torch.as_tensor(np.flatnonzero(train_mask), device=device)
    val_idx = torch.as_tensor(np.flatnonzero(~train_mask), device=device)
    checkpoint_dir = None if work_dir is None else Path(work_dir) / "checkpoint"

    phase_facts = {}
    for number, phase in enumerate(_phases(params)):
        loss_fn = _phase_loss(phase, model, x, covariates, params["gamma"])
        phase_facts[phase] = _train_phase(
            phase, number, model, loss_fn, train_idx, val_idx, params, seed, checkpoint_dir
        )

    model.eval()
    with torch.no_grad():
        cell_embedding = model.cell_side(x, covariates).mu
        gene_embedding = model.gene_side().mu.cpu().numpy() if model.has_gene_vae else None
    return SciLaMAResult(cell_embedding.cpu().numpy(), gene_embedding, phase_facts, str(device))
