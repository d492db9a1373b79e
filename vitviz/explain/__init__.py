"""Explanation methods of DESIGN §5, pure torch, batch-first."""

from vitviz.explain.attribution import (
    AttributionResult,
    attention_relevance,
    transformer_attribution,
)
from vitviz.explain.faithfulness import (
    Curves,
    ImageFaithfulness,
    evaluate_methods,
    faithfulness,
)
from vitviz.explain.fusion import FUSIONS, fuse_heads
from vitviz.explain.gradcam import attention_gradcam, token_gradcam
from vitviz.explain.gradients import (
    AttentionGradients,
    GradientProducts,
    attention_gradient_products,
    attention_gradients,
)
from vitviz.explain.gradsam import grad_sam
from vitviz.explain.localisation import Localisation, localise, mask_to_grid
from vitviz.explain.maps import attention_maps, prefix_attention
from vitviz.explain.masks import dino_masks
from vitviz.explain.methods import (
    Method,
    all_methods,
    get_method,
    register_method,
    unregister_method,
)
from vitviz.explain.params import Parameter
from vitviz.explain.random_map import random_map
from vitviz.explain.rollout import (
    PreparedRollout,
    gradient_rollout,
    prepare_gradient_rollout,
    prepare_relevance,
    prepare_rollout,
    prepared_relevance_map,
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
    "AttributionResult",
    "Curves",
    "GradientProducts",
    "HeadStatistics",
    "ImageFaithfulness",
    "Localisation",
    "Method",
    "Parameter",
    "PreparedRollout",
    "all_methods",
    "attention_entropy",
    "attention_gradcam",
    "attention_gradient_products",
    "attention_gradients",
    "attention_maps",
    "attention_relevance",
    "dino_masks",
    "evaluate_methods",
    "faithfulness",
    "fuse_heads",
    "get_method",
    "grad_sam",
    "gradient_rollout",
    "head_statistics",
    "localise",
    "mask_to_grid",
    "mean_attention_distance",
    "prefix_attention",
    "prefix_share",
    "prepare_gradient_rollout",
    "prepare_relevance",
    "prepare_rollout",
    "prepared_relevance_map",
    "query_token",
    "random_map",
    "register_method",
    "relevance",
    "relevance_row",
    "rollout",
    "rollout_map",
    "rollout_row",
    "token_gradcam",
    "token_norms",
    "transformer_attribution",
    "unregister_method",
]
