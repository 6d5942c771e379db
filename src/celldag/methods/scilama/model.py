"""sciLaMA's two VAEs (spec §1): a cell VAE on expression and a gene VAE on a static per-gene input.

They share no latent space; they meet only in inner products of their decoders' last hidden layers
(reconstruction) and of their latents (alignment), both plus the cell decoder's per-gene bias.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

# σ² = exp(logvar) + VAR_EPS keeps the variance off zero (the official template's value, spec §1.3)
VAR_EPS = 1e-4


def _init(linear: nn.Linear) -> nn.Linear:
    nn.init.xavier_normal_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def hidden_stack(dims: list[int], dropout: float) -> nn.Sequential:
    """Linear → LayerNorm (no affine) → LeakyReLU → Dropout for each consecutive pair of ``dims``."""
    layers: list[nn.Module] = []
    for n_in, n_out in zip(dims[:-1], dims[1:]):
        layers += [
            _init(nn.Linear(n_in, n_out)),
            nn.LayerNorm(n_out, elementwise_affine=False),
            nn.LeakyReLU(),
            nn.Dropout(dropout),
        ]
    return nn.Sequential(*layers)


class GaussianEncoder(nn.Module):
    """Input → hidden stack → (μ, log-variance), each of width ``latent_dim``."""

    def __init__(self, n_in: int, hidden_dims: list[int], latent_dim: int, dropout: float):
        super().__init__()
        self.body = hidden_stack([n_in, *hidden_dims], dropout)
        self.mu = _init(nn.Linear(hidden_dims[-1], latent_dim))
        self.logvar = _init(nn.Linear(hidden_dims[-1], latent_dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(x)
        return self.mu(hidden), self.logvar(hidden)


class HiddenDecoder(nn.Module):
    """Latent → the encoder's hidden widths reversed; the last layer is a plain Linear (no norm, no
    activation) whose output h, of width ``hidden_dims[0]``, enters the inner products."""

    def __init__(self, n_in: int, hidden_dims: list[int], dropout: float):
        super().__init__()
        dims = [n_in, *reversed(hidden_dims)]
        self.body = hidden_stack(dims[:-1], dropout)
        self.last = _init(nn.Linear(dims[-2], dims[-1]))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.last(self.body(z))


def sample(mu: torch.Tensor, logvar: torch.Tensor, training: bool) -> torch.Tensor:
    """Reparameterised draw in training; μ in eval, so validation and embeddings are deterministic."""
    if not training:
        return mu
    return mu + torch.sqrt(logvar.exp() + VAR_EPS) * torch.randn_like(mu)


def _with_covariates(x: torch.Tensor, covariates: torch.Tensor | None) -> torch.Tensor:
    return x if covariates is None else torch.cat([x, covariates], dim=1)


@dataclass(frozen=True)
class Side:
    """One VAE's pass: sampled latent, its posterior, and the decoder's last hidden layer."""

    z: torch.Tensor
    mu: torch.Tensor
    logvar: torch.Tensor
    h: torch.Tensor


class SciLaMA(nn.Module):
    """Cell VAE (conditional on one-hot covariates at encoder and decoder input) plus, when
    ``gene_input`` (G × D) is given, a gene VAE over its rows.

    ``gene_input`` is a non-persistent buffer: moved to the device once with the model, and kept out of
    state dicts, so checkpoints and best-weight copies do not carry a possibly 270 MB constant.
    """

    def __init__(
        self,
        n_genes: int,
        n_covariates: int,
        gene_input: torch.Tensor | None,
        hidden_dims: list[int],
        gene_hidden_dims: list[int],
        latent_dim: int,
        dropout: float,
    ):
        super().__init__()
        self.cell_encoder = GaussianEncoder(n_genes + n_covariates, hidden_dims, latent_dim, dropout)
        self.cell_decoder = HiddenDecoder(latent_dim + n_covariates, hidden_dims, dropout)
        # W^cell and the per-gene bias b; b is shared by the inner-product reconstructions
        self.cell_output = nn.Sequential(nn.Dropout(dropout), _init(nn.Linear(hidden_dims[0], n_genes)))
        self.has_gene_vae = gene_input is not None
        if self.has_gene_vae:
            if gene_hidden_dims[0] != hidden_dims[0]:
                raise ValueError(
                    f"the inner product needs equal decoder widths: gene_hidden_dims[0] = {gene_hidden_dims[0]}, "
                    f"hidden_dims[0] = {hidden_dims[0]}"
                )
            if gene_input.shape[0] != n_genes:
                raise ValueError(f"gene_input has {gene_input.shape[0]} rows for {n_genes} genes")
            self.register_buffer("gene_input", gene_input, persistent=False)
            self.gene_encoder = GaussianEncoder(gene_input.shape[1], gene_hidden_dims, latent_dim, dropout)
            self.gene_decoder = HiddenDecoder(latent_dim, gene_hidden_dims, dropout)

    @property
    def gene_bias(self) -> torch.Tensor:
        return self.cell_output[-1].bias

    def cell_side(self, x: torch.Tensor, covariates: torch.Tensor | None) -> Side:
        mu, logvar = self.cell_encoder(_with_covariates(x, covariates))
        z = sample(mu, logvar, self.training)
        return Side(z, mu, logvar, self.cell_decoder(_with_covariates(z, covariates)))

    def gene_side(self) -> Side:
        """All G genes at once: the whole gene table is the gene VAE's minibatch (spec §1.6)."""
        mu, logvar = self.gene_encoder(self.gene_input)
        z = sample(mu, logvar, self.training)
        return Side(z, mu, logvar, self.gene_decoder(z))

    def cell_reconstruction(self, h_cell: torch.Tensor) -> torch.Tensor:
        """The cell VAE's own output h·W^cell + b (phase 1 only)."""
        return self.cell_output(h_cell)

    def inner_reconstruction(self, cell: torch.Tensor, gene: torch.Tensor) -> torch.Tensor:
        """x̂[c, g] = ⟨cell[c], gene[g]⟩ + b_g; with decoder outputs h it is the reconstruction, with
        latents z the alignment term."""
        return cell @ gene.T + self.gene_bias
