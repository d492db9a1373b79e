"""SwiGLU MLP (EVA-02's): a SiLU-gated hidden layer, with an optional sub-LN before fc2."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.model.config import ViTConfig
from vitviz.model.norms import make_norm


class SwiGLU(nn.Module):
    """(B, N, dim) -> (B, N, dim): fc2(norm(SiLU(fc1_g x) ⊙ fc1_x x)), hidden width
    ``config.hidden_dim``; ``norm`` is a LayerNorm with ``mlp_norm`` (sub-LN), else identity."""

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

    def forward(self, x: Tensor) -> Tensor:
        hidden = F.silu(self.fc1_g(x)) * self.fc1_x(x)  # (B, N, hidden)
        return self.drop(self.fc2(self.norm(self.drop(hidden))))
