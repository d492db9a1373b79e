"""The ConViT's versions of the method table's entries, on its captured layout
(``vitviz.kinds.convit.network``: every layer's attention over [CLS, patches]; in a GPSA layer
the CLS row is the identity and no patch attends to the CLS, their gradients 0).

What each method is on a ConViT (S GPSA layers, then L − S plain ones; a GPSA layer's A the
gated mixture (1 − σ(g))·softmax(QKᵀ/√d) + σ(g)·softmax(pos), renormalised, as timm computes it):

- raw attention, DINO masks, attention Grad-CAM: one layer's row of the query. The CLS is not
  in a GPSA layer: the CLS query there is refused with the reason (the window shows those
  thumbnails blank); a patch queries in every layer.
- rollout, gradient rollout, relevance, Grad-SAM, token Grad-CAM: the ViT's definitions on the
  captured layout (DESIGN §5). On the CLS's identity rows Ã_l = rownorm(Â_l + I) is the
  identity, so the CLS's rollout is its chain through the plain layers continued over the
  patches through the GPSA layers. The discard ratio is refused: its count ⌊ratio·N²⌋ would
  count the identity row and the zero column of the GPSA layers.
- transformer attribution: refused (no LRP rule for the GPSA's gated mixture of two softmaxes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.subject import Explained
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.late_cls_methods import Query, one_layer_method
from vitviz.kinds.vit.methods import METHODS as VIT_METHODS

NO_DISCARD = (
    "a ConViT's GPSA layers hold the CLS's identity row and a zero column, which the discard "
    "count ⌊ratio·N²⌋ would count"
)
NO_LRP = "it has no LRP rule for the GPSA's gated mixture of two softmaxes"


def gpsa_layers(analysis: Any) -> tuple[int, int]:
    """(GPSA layers, all layers) of ``analysis``'s model."""
    cfg = analysis.loaded.model.config
    return int(cfg.gpsa_depth), int(cfg.depth)


def query_problem(gpsa: int, depth: int, layer: int, query: Query) -> str | None:
    """Why ``query`` (None: the CLS) has no row in model layer ``layer`` (-1: the last), or
    None when it queries there."""
    layer = layer + depth if layer < 0 else layer
    if layer < gpsa and query is None:
        return (
            f"layer {layer} is a GPSA block over the patches: the CLS token joins only after "
            f"them (layers {gpsa}-{depth - 1}); click a patch, or pick one of those layers"
        )
    return None


def _one_layer(name: str, fixed_layer: int | None = None) -> Any:
    return one_layer_method(VIT_METHODS[name], gpsa_layers, query_problem, fixed_layer)


def _rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.rollout(q, p["fusion"], None, 0.0, p["start_layer"])


def _gradient_rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.gradient_rollout(c, q, 0.0, p["start_layer"])


# The ConViT kind's one declaration (DESIGN §5): its versions of the table's methods, each
# taking every parameter of its entry but those it refuses ...
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_one_layer("attention")),
    "rollout": KindMethod(_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "gradient-rollout": KindMethod(_gradient_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "relevance": KindMethod(VIT_METHODS["relevance"].compute),
    "dino-masks": KindMethod(_one_layer("dino-masks")),
    "grad-sam": KindMethod(VIT_METHODS["grad-sam"].compute),
    "attention-gradcam": KindMethod(_one_layer("attention-gradcam", fixed_layer=-1)),
    "gradcam": KindMethod(VIT_METHODS["gradcam"].compute),  # the model's own last block
}
# ... and what it can't run, with why
CANNOT: dict[str, str] = {"transformer-attribution": NO_LRP}
