"""sciLaMA's losses (spec §2.1–2.3): Gaussian likelihood with unit variance, i.e. squared error on scaled
log-normalised expression summed over genes and averaged over cells, plus β-weighted KL terms."""

from __future__ import annotations

import torch

from celldag.methods.scilama.model import VAR_EPS


def kl_weight(epoch: int, warmup_epochs: int, ramp_epochs: int) -> float:
    """β for a 0-based ``epoch``: 0 up to ``warmup_epochs``, then rising linearly to 1 over ``ramp_epochs``.

    The paper's 25 + 20 gives β = 0 through epoch 25, 0.05 at 26, and 1 from epoch 45 on (spec §2.3).
    """
    if ramp_epochs < 1:
        raise ValueError(f"ramp_epochs must be at least 1, got {ramp_epochs}")
    return min(1.0, max(0.0, (epoch - warmup_epochs) / ramp_epochs))


def first_full_kl_epoch(warmup_epochs: int, ramp_epochs: int) -> int:
    """The first epoch with β = 1: early stopping and model selection start here."""
    return warmup_epochs + ramp_epochs


def kl_divergence(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(μ, σ²) ‖ N(0, I)) per row, summed over latent dimensions, with σ² = exp(logvar) + VAR_EPS."""
    mu, variance = mu.float(), logvar.float().exp() + VAR_EPS
    return 0.5 * (variance + mu.square() - 1.0 - variance.log()).sum(dim=1)


def squared_error(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """Σ over genes of (x − x̂)², averaged over cells; in float32 also under bf16 autocast."""
    return (x - x_hat.float()).square().sum(dim=1).mean()


def cell_vae_loss(x: torch.Tensor, x_hat: torch.Tensor, mu: torch.Tensor, logvar: torch.Tensor, beta: float):
    """Phase 1 (and the cell-only ablation): the cell VAE through its own output layer W^cell."""
    return squared_error(x, x_hat) + beta * kl_divergence(mu, logvar).mean()


def coupled_loss(
    x: torch.Tensor,
    reconstruction: torch.Tensor,
    beta: float,
    kl_gene: torch.Tensor,
    kl_cell: torch.Tensor | None = None,
    gamma: float = 0.0,
    alignment: torch.Tensor | None = None,
) -> torch.Tensor:
    """Phases 2 and 3: inner-product reconstruction, optionally the γ-weighted alignment reconstruction,
    and β·(mean KL over genes + mean KL over cells). Phase 2 passes no ``kl_cell``: the cell side is frozen.
    """
    loss = squared_error(x, reconstruction)
    if alignment is not None:
        loss = loss + gamma * squared_error(x, alignment)
    kl = kl_gene.mean() if kl_cell is None else kl_gene.mean() + kl_cell.mean()
    return loss + beta * kl
