"""Head statistics: attention distance, entropy, prefix share, token norms (DESIGN §5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def patch_distances(grid: tuple[int, int], patch_size: int, like: Tensor) -> Tensor:
    """Euclidean distance in pixels between the centres of every pair of patches: (P, P)."""
    gh, gw = grid
    rows, cols = torch.meshgrid(
        torch.arange(gh, device=like.device), torch.arange(gw, device=like.device), indexing="ij"
    )
    pos = torch.stack([rows.flatten(), cols.flatten()], dim=1).to(like)  # (P, 2) on its device
    return torch.cdist(pos, pos) * patch_size


def mean_attention_distance(
    attn: Tensor,
    grid: tuple[int, int],
    num_prefix: int,
    patch_size: int,
    distances: Tensor | None = None,
) -> Tensor:
    """Σ_j A[q, j]·‖pos_q − pos_j‖·patch over patch keys, mean over patch queries: (B, H).

    attn: (B, H, N, N). The weights are used as they are (not renormalised over the patches).
    ``distances``: ``patch_distances`` made once for many layers (else made here).
    """
    a = attn[:, :, num_prefix:, num_prefix:]  # (B, H, P, P)
    dist = patch_distances(grid, patch_size, a) if distances is None else distances  # (P, P)
    return torch.einsum("bhqk,qk->bhq", a, dist).mean(dim=-1)  # no (B, H, P, P) temporary


def attention_entropy(attn: Tensor, num_prefix: int) -> Tensor:
    """Entropy (nats) of each patch query's row over all keys, mean over patch queries: (B, H)."""
    tiny = torch.finfo(attn.dtype).tiny
    out = []
    for rows in attn[:, :, num_prefix:, :]:  # (H, P, N) at a time: small temporaries, in place
        # p·log(p + tiny): 0·log 0 counts 0, and p + tiny == p for every p that matters
        plogp = (rows + tiny).log_().mul_(rows)
        out.append(-plogp.sum(dim=-1).mean(dim=-1))
    return torch.stack(out)  # (B, H)


def prefix_share(attn: Tensor, num_prefix: int) -> Tensor:
    """Share of each patch query's attention that goes to prefix tokens, mean: (B, H)."""
    rows = attn[:, :, num_prefix:, :]  # (B, H, P, N)
    return rows[..., :num_prefix].sum(dim=-1).mean(dim=-1)


def token_norms(hidden_states: Sequence[Tensor]) -> Tensor:
    """L2 norm of every token after every block: L × (B, N, D) -> (B, L, N)."""
    return torch.stack([h.norm(dim=-1) for h in hidden_states], dim=1)


@dataclass
class HeadStatistics:
    mean_distance: Tensor  # (B, L, H) pixels of the model input
    entropy: Tensor  # (B, L, H) nats
    prefix_share: Tensor  # (B, L, H) in [0, 1]


def head_statistics(
    attentions: Sequence[Tensor], grid: tuple[int, int], num_prefix: int, patch_size: int
) -> HeadStatistics:
    """Per layer and head statistics for L × (B, H, N, N) attention."""
    return HeadStatistics(
        mean_distance=torch.stack(
            [mean_attention_distance(a, grid, num_prefix, patch_size) for a in attentions], 1
        ),
        entropy=torch.stack([attention_entropy(a, num_prefix) for a in attentions], 1),
        prefix_share=torch.stack([prefix_share(a, num_prefix) for a in attentions], 1),
    )
