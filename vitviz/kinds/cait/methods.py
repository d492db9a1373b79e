"""The CaiT's versions of the method table's entries, on its captured layout
(``vitviz.kinds.cait.network``: every layer's attention over [CLS, patches], the rows of tokens a
layer does not update being the identity, their gradients 0).

What each method is on a CaiT (S self-attention layers, then K class-attention layers; A_l the
captured matrix, post-softmax and, in a self-attention layer, post-``proj_w``: the one that
multiplies V):

- raw attention, DINO masks, attention Grad-CAM: one layer's row of the query. A patch queries
  only in the self-attention layers, the CLS only in the class-attention layers; the other
  combination is refused with the reason (the window shows those thumbnails blank).
- rollout and gradient rollout: DESIGN §5's chain on the captured layout, Ã_l = rownorm(Â_l + I).
  On the identity rows Ã_l is the identity, so the CLS's row is its chain through the
  class-attention layers (each a 1 × (1 + P) row; its patch part passes on) followed by the
  self-attention chain over the patches (P × P):
      r ← e_q;  r ← r·Ã_l for l = L .. s;  map = r[patches] / max.
  A patch query's row passes the class-attention layers unchanged. The discard ratio is refused:
  DESIGN's count ⌊ratio·N²⌋ is of one N × N matrix, and a CaiT's layers are P × P and 1 × (1 + P).
- relevance (Chefer 2021b): R = I, R ← R + Ā_l·R for l = s..L, Ā_l = mean_h((G_l ⊙ A_l)⁺) on the
  captured layout; Ā_l is 0 on the identity rows and the zero column (A or G is 0 there), so the
  CLS's relevance over the patches is the class-attention layers' sum of paths to the patches,
  each continued through the self-attention layers' relevance over the patches.
- Grad-SAM: mean_{l,h}(G_l⁺ ⊙ A_l)[q, patches], min-max scaled: only the layers where q queries
  contribute (the others' rows are 0), the mean's 1/L scale is lost to the scaling.
- token Grad-CAM: on the last block's first LayerNorm (the last class-attention block's, over
  [CLS, patches]).
- transformer attribution (Chefer, Gur & Wolf 2021; ``vitviz.kinds.cait.attribution``): the
  ViT's LRP rules (z⁺ for every Linear, bias ignored; LayerNorm, GELU, softmax, LayerScale
  unchanged; A·V and Q·Kᵀ halved z rule; the rescaled residual add; the fork) and the same
  vocabulary for the CaiT's parts: the talking heads' ``proj_w`` (after the softmax) and
  ``proj_l`` (before it) are Linears over the head axis, z⁺ rule; R_A^l is taken at the matrix
  that multiplies V (the captured, post-``proj_w`` one; a class-attention layer's CLS row);
  class attention: the CLS's q·Kᵀ and A·V by the halved z rule, q, k and v by z⁺ and the fork
  at the normed tokens they read, the patches carried past the block unchanged (a fork with
  k and v), the CLS's relevance stopping below the first class-attention block (the learnt
  token). R_A^l and G_l in the captured layout (0 on the identity rows), then relevance's
  chain with R_A for A: R = I, R ← R + Ā_l·R, Ā_l = mean_h((G_l ⊙ R_A^l)⁺), l = s..L, the
  query's row (the CLS's, or a patch's, whose rows are in the self-attention layers only) over
  the patches, min-max scaled.
"""

from __future__ import annotations

from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.cait.attribution import cait_attention_relevance
from vitviz.kinds.class_attention_methods import CANNOT as CLASS_ATTENTION_CANNOT
from vitviz.kinds.class_attention_methods import METHODS as CLASS_ATTENTION_METHODS
from vitviz.kinds.class_attention_methods import (  # noqa: F401  (their names, as before)
    NO_DISCARD,
    Query,
    class_layers,
    query_problem,
    require_patch_queries,
    transformer_attribution,
)

# The CaiT kind's one declaration (DESIGN §5): the class-attention layout's versions and its
# own LRP, each taking every parameter of its entry but those it refuses ...
METHODS: dict[str, KindMethod] = {
    **CLASS_ATTENTION_METHODS,
    "transformer-attribution": transformer_attribution(cait_attention_relevance),
}
# ... and what it can't run (``missing_method``), with why: nothing
CANNOT: dict[str, str] = dict(CLASS_ATTENTION_CANNOT)
