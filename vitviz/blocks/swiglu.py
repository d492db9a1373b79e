"""SwiGLU MLP (EVA-02's): a SiLU-gated hidden layer, with an optional sub-LN before fc2."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.norms import make_norm


class SwiGLU(nn.Module):
    """(B, N, dim) -> (B, N, dim): fc2(norm(SiLU(fc1_g x) ⊙ fc1_x x)), hidden width
    ``config.hidden_dim``; ``norm`` is a LayerNorm with ``mlp_norm`` (sub-LN), else identity.
    With ``swiglu_packed`` fc1_g and fc1_x run as one Linear of twice the width, their weights
    packed in that order (timm's GluMlp): the same float32 rounding as the library's."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        hidden = config.hidden_dim
        self.fc1_g = nn.Linear(config.dim, hidden)
        self.fc1_x = nn.Linear(config.dim, hidden)
        self.norm: nn.Module = (
            make_norm(config.norm, hidden, config.norm_eps) if config.mlp_norm else nn.Identity()
        )
        self.fc2 = nn.Linear(hidden, config.dim)
        self.drop = nn.Dropout(config.drop_rate)
        self.packed = config.swiglu_packed

    def projections(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, dim) -> (fc1_g x, fc1_x x), each (B, N, hidden), as one product when packed."""
        if self.packed:
            g, v = self.fc1_g, self.fc1_x
            first, second = (g, v) if self.packed == "gate_value" else (v, g)
            weight = torch.cat([first.weight, second.weight])  # (2·hidden, dim)
            both = F.linear(x, weight, torch.cat([first.bias, second.bias]))
            a, b = both.chunk(2, dim=-1)
            return (a, b) if self.packed == "gate_value" else (b, a)
        return self.fc1_g(x), self.fc1_x(x)

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.projections(x)
        hidden = F.silu(gate) * value  # (B, N, hidden)
        return self.drop(self.fc2(self.norm(self.drop(hidden))))
