"""CellTreeQM encoder: a transformer whose tokens are the leaves of the lineage tree.

Without positional encoding the encoder is permutation-equivariant over leaves, and attention makes
each leaf's embedding depend on the whole set it is embedded with (the model is transductive).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

GATES = ("none", "sigmoid", "softmax", "gumbel")
NORMS = ("batch_norm", "layer_norm", "none")
_GATE_EMBEDDING, _GATE_HIDDEN = 32, 64
_GATE_OPEN_BIAS = 5.0  # logit of "open" at initialisation, so gates start (almost) fully open


class FeatureGate(nn.Module):
    """A learnable per-feature gate in [0, 1] that can switch off spurious features.

    The official code's fourth kind, a full C×C ``linear`` gate, is left out: at gene scale
    (C ≈ 13k) it alone would hold ~170M parameters.
    """

    def __init__(self, n_features: int, kind: str) -> None:
        super().__init__()
        if kind not in GATES[1:]:
            raise ValueError(f"gate must be one of {GATES[1:]}, got {kind!r}")
        self.kind = kind
        if kind == "sigmoid":
            self.logit = nn.Parameter(torch.ones(n_features))
        else:
            # per-feature embedding → small MLP → logits (closed, open)
            self.embedding = nn.Parameter(torch.randn(n_features, _GATE_EMBEDDING) * 0.01)
            self.mlp = nn.Sequential(nn.Linear(_GATE_EMBEDDING, _GATE_HIDDEN), nn.ReLU(), nn.Linear(_GATE_HIDDEN, 2))
            with torch.no_grad():
                self.mlp[-1].bias.copy_(torch.tensor([0.0, _GATE_OPEN_BIAS]))

    def open_probability(self) -> torch.Tensor:
        """(C,) deterministic gate values: σ(g), or the softmax probability of "open"."""
        if self.kind == "sigmoid":
            return torch.sigmoid(self.logit)
        return torch.softmax(self.mlp(self.embedding), dim=-1)[:, 1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind != "gumbel":
            return x * self.open_probability()
        logits = self.mlp(self.embedding)
        if self.training:  # binary straight-through sample: forward 0/1, backward through the softmax
            gate = F.gumbel_softmax(logits, tau=1.0, hard=True)[:, 1]
        else:  # evaluation is deterministic: the more likely state
            gate = (logits[:, 1] > logits[:, 0]).to(x.dtype)
        return x * gate


class CellTreeQMEncoder(nn.Module):
    """(N, C) or (1, N, C) leaf features → (N, output_dim) embedding."""

    def __init__(
        self,
        n_features: int,
        proj_dim: int,
        hidden_dim: int,
        n_layers: int,
        n_heads: int,
        output_dim: int,
        dropout_data: float,
        dropout_metric: float,
        norm: str = "batch_norm",
        gate: str = "none",
    ) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.gate = None if gate == "none" else FeatureGate(n_features, gate)
        self.project = nn.Linear(n_features, proj_dim)
        nn.init.xavier_normal_(self.project.weight)
        self.input_dropout = nn.Dropout(dropout_data)
        layer = nn.TransformerEncoderLayer(
            proj_dim,
            n_heads,
            dim_feedforward=hidden_dim,
            dropout=dropout_data,
            activation="relu",
            batch_first=True,
            norm_first=True,
        )
        # nested tensors only help padded batches; ours is one unpadded set
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(proj_dim, output_dim)
        # batch norm over the leaves: statistics are taken across the set, as in the paper
        if norm == "batch_norm":
            self.norm = nn.BatchNorm1d(output_dim)
        elif norm == "layer_norm":
            self.norm = nn.LayerNorm(output_dim)
        else:
            self.norm = nn.Identity()
        self.metric_dropout = nn.Dropout(dropout_metric)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        tokens = features if features.dim() == 3 else features.unsqueeze(0)
        if tokens.dim() != 3 or tokens.shape[0] != 1:
            raise ValueError(f"features must be (N, C) or (1, N, C), got {tuple(features.shape)}")
        if self.gate is not None:
            tokens = self.gate(tokens)
        hidden = self.encoder(self.input_dropout(self.project(tokens)))
        return self.metric_dropout(self.norm(self.head(hidden[0])))

    def gate_values(self) -> torch.Tensor | None:
        """(C,) current gate values without sampling noise; None without a gate."""
        return None if self.gate is None else self.gate.open_probability()

    def gate_penalty(self, kind: str) -> torch.Tensor:
        """``sparsity`` = mean gate (closes gates), ``retain`` = mean(1 − gate) (keeps them open); 0 if no gate."""
        gates = self.gate_values()
        if gates is None:
            return self.project.weight.new_zeros(())
        if kind == "sparsity":
            return gates.mean()
        if kind == "retain":
            return (1 - gates).mean()
        raise ValueError(f"gate penalty kind must be 'sparsity' or 'retain', got {kind!r}")
