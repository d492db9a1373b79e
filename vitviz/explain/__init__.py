"""Explanation methods of DESIGN §5, pure torch, batch-first."""

from vitviz.explain.fusion import FUSIONS, fuse_heads
from vitviz.explain.gradients import AttentionGradients, attention_gradients
from vitviz.explain.maps import attention_maps, prefix_attention
from vitviz.explain.masks import dino_masks
from vitviz.explain.rollout import (
    PreparedRollout,
    gradient_rollout,
    prepare_gradient_rollout,
    prepare_rollout,
    relevance,
    relevance_row,
    rollout,
    rollout_map,
    rollout_row,
)
from vitviz.explain.stats import (
    HeadStatistics,
    attention_entropy,
    head_statistics,
    mean_attention_distance,
    prefix_share,
    token_norms,
)
from vitviz.explain.tokens import query_token

__all__ = [
    "FUSIONS",
    "AttentionGradients",
    "HeadStatistics",
    "PreparedRollout",
    "attention_entropy",
    "attention_gradients",
    "attention_maps",
    "dino_masks",
    "fuse_heads",
    "gradient_rollout",
    "head_statistics",
    "mean_attention_distance",
    "prefix_attention",
    "prefix_share",
    "prepare_gradient_rollout",
    "prepare_rollout",
    "query_token",
    "relevance",
    "relevance_row",
    "rollout",
    "rollout_map",
    "rollout_row",
    "token_norms",
]
