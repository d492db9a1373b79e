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

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.attribution import AttributionResult, attribution_map
from vitviz.explain.subject import Explained
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.cait.attribution import cait_attention_relevance
from vitviz.kinds.vit.methods import METHODS as VIT_METHODS
from vitviz.kinds.vit.methods import cached_result, model_input, target_class

Query = tuple[int, int] | None

NO_DISCARD = (
    "a CaiT's layers are P × P (self-attention over the patches) and 1 × (1 + P) (the CLS's "
    "class attention), so DESIGN's one count of ⌊ratio·N²⌋ entries has no single meaning"
)


def class_layers(analysis: Explained) -> tuple[int, int]:
    """(self-attention layers S, model layers L) of the analysis's CaiT."""
    assert analysis.loaded is not None
    cfg = analysis.loaded.model.config
    return int(cfg.self_depth), int(cfg.depth)


def query_problem(self_depth: int, depth: int, layer: int, query: Query) -> str | None:
    """Why ``query`` (None: the CLS) has no row in model layer ``layer`` (-1: the last), or
    None when it queries there."""
    layer = layer + depth if layer < 0 else layer
    if layer < self_depth and query is None:
        return (
            f"layer {layer} is a self-attention block over the patches: the CLS token "
            f"joins only at the class-attention blocks (layers {self_depth}-{depth - 1}); "
            "click a patch, or pick one of those layers"
        )
    if layer >= self_depth and query is not None:
        other = f", or a self-attention layer (0-{self_depth - 1})" if self_depth else ""
        return (
            f"layer {layer} is a class-attention block: only the CLS token queries there "
            f"(a patch takes nothing from other tokens there); use the CLS query{other}"
        )
    return None


def _one_layer(name: str, fixed_layer: int | None = None) -> Any:
    own = VIT_METHODS[name]

    def compute(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
        S, L = class_layers(a)
        layer = fixed_layer if fixed_layer is not None else int(p["layer"])
        why = query_problem(S, L, layer, q)
        if why is not None:
            raise ValueError(why)
        return own(a, q, c, p)

    return compute


def require_patch_queries(a: Explained, q: Query) -> None:
    """ValueError for a patch query on a model where no layer has a patch query (an XCiT's
    class-attention layers only): its chain would be the patch itself."""
    if q is not None and class_layers(a)[0] == 0:
        raise ValueError(
            "no layer of this model has a patch query (only the CLS queries, in the "
            "class-attention blocks); use the CLS query"
        )


def _rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    require_patch_queries(a, q)
    return a.rollout(q, p["fusion"], None, 0.0, p["start_layer"])


def _gradient_rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    require_patch_queries(a, q)
    return a.gradient_rollout(c, q, 0.0, p["start_layer"])


def _chained(name: str) -> Any:
    own = VIT_METHODS[name]

    def compute(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
        require_patch_queries(a, q)
        return own(a, q, c, p)

    return compute


def _transformer_attribution(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    require_patch_queries(a, q)
    cls = target_class(a, c)

    def build() -> AttributionResult:
        model, x = model_input(a)
        return cait_attention_relevance(model, x, cls)

    res = cached_result(a, ("transformer-attribution", cls), build)
    return attribution_map(res, q, p["start_layer"])[0]


# The CaiT kind's one declaration (DESIGN §5): its versions of the table's methods, each taking
# every parameter of its entry but those it refuses ...
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_one_layer("attention")),
    "rollout": KindMethod(_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "gradient-rollout": KindMethod(_gradient_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "relevance": KindMethod(_chained("relevance")),
    "dino-masks": KindMethod(_one_layer("dino-masks")),
    "transformer-attribution": KindMethod(_transformer_attribution),
    "grad-sam": KindMethod(_chained("grad-sam")),
    "attention-gradcam": KindMethod(_one_layer("attention-gradcam", fixed_layer=-1)),
    "gradcam": KindMethod(VIT_METHODS["gradcam"].compute),  # its own CaitModel's last block
}
# ... and what it can't run (``CaitKind.missing_method``), with why: nothing
CANNOT: dict[str, str] = {}
