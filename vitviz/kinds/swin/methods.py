"""The method table's entries that run on a Swin, over a SwinAnalysis (used by the window's engine,
``vitviz-cli explain`` and ``faithfulness``): attention (one block and head), the windowed rollout,
the windowed gradient rollout and Grad-CAM on a layer's tokens (the table's, on vitviz's own Swin;
the random baseline is the table's own). Every
other method needs a ViT's CLS token or its one grid of patches and says so (``CANNOT``). The
kind's one declaration of them is ``METHODS`` and ``CANNOT`` at the end (DESIGN §5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from vitviz.explain.gradcam import gradcam_method
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.kind_methods import block_index
from vitviz.kinds.swin.analysis import SwinAnalysis
from vitviz.kinds.swin.attention import from_slots, query_row, windowed_attention
from vitviz.kinds.swin.network import SwinTransformer

# why a table parameter means nothing to a Swin's windowed rollouts (``KindMethod.refusals``:
# the table refuses it with this reason)
NOT_IN_WINDOWED_ROLLOUT = {
    "discard_ratio": "the windowed rollout of a Swin has no discard step (it keeps every entry "
    "of each window)",
    "start_layer": "the windowed rollout of a Swin always runs through every block of every stage",
}
# why a Swin can't run the table's other methods (``SwinKind.missing_method``)
NO_CLS = "it needs a ViT's CLS token and single patch grid; a Swin has neither"


def attention_map(analysis: SwinAnalysis, block: int, head: int, token: int | None) -> Tensor:
    """(H_b, W_b) block ``block``'s attention of query ``token`` (None: the mean row over all
    tokens, what the average pool reads) for head ``head`` (−1: the mean over heads)."""
    b = block_index(analysis, block)
    attn, layout = analysis.attentions[b], analysis.layouts[b]
    H, W = layout.grid
    heads = int(attn.shape[1])
    if not -1 <= head < heads:
        raise ValueError(f"head {head} out of range: block {b} has {heads} heads (-1: their mean)")
    if token is None:
        kept = windowed_attention(attn, layout).sum(dim=2)  # (windows, heads, n): column sums
        rows = from_slots(kept.permute(1, 0, 2), layout) / (H * W)  # (heads, N)
    else:
        rows = query_row(attn, layout, token)  # (heads, N)
    rows = rows.float()
    picked = rows.mean(dim=0) if head == -1 else rows[head]
    return picked.reshape(H, W)


def swin_method_map(
    analysis: SwinAnalysis,
    model: Any,
    name: str,
    query: tuple[int, int] | None,
    target_class: int | None = None,
    params: Mapping[str, Any] | None = None,
) -> Tensor:
    """The map of method ``name``: ``query`` (token, stage) picks the query token (None: the
    average pool). ``attention``: block ``params['layer']`` (the table's name; blocks of all
    stages counted from 0, default the last), head ``params['head']`` (−1: mean), at the block's
    resolution; rollouts over the first stage's grid; Grad-CAM over its layer's stage grid
    (``params['layer']``, default ``auto``: a v1's last norm1, a v2's last block's output)."""
    p = dict(params or {})
    token, stage = (None, None) if query is None else query
    if name == "attention":
        b = block_index(analysis, int(p.get("layer", -1)))
        if token is not None and stage != analysis.block_stages[b]:
            raise ValueError(f"the query token is of stage {stage}, block {b} is not")
        return attention_map(analysis, b, int(p.get("head", -1)), token)
    if name == "rollout":
        return analysis.rollout(str(p.get("fusion", "mean")), None, token, stage)
    if name == "gradient-rollout":
        if target_class not in (None, analysis.target_class):
            raise ValueError("the gradient rollout was taken for the top class only")
        return analysis.gradient_rollout(token, stage)
    if name == "gradcam":  # the table's, on its layer (``auto``: DESIGN §5)
        return gradcam_method(analysis, None, target_class, p)
    from vitviz.explain.methods import get_method
    from vitviz.kindapi import get_kind

    method = get_method(name)  # ValueError naming the table's methods for an unknown name
    raise ValueError(method.missing_on(get_kind("swin")) or f"{name} is the table's own version")


def _requires_own_swin(label: str, model: nn.Module) -> str | None:
    """Grad-CAM on a layer's tokens reads the blocks of vitviz's own Swin."""
    if isinstance(model, SwinTransformer):
        return None
    return (
        f"{label} needs vitviz's own Swin (it reads its blocks' norms and outputs), "
        "and this model comes from your code"
    )


def with_gradients(analysis: SwinAnalysis, target_class: int | None) -> SwinAnalysis:
    """``analysis`` when it holds the gradients of ``target_class`` (None: its own class),
    else the same input analysed again with them (kept on ``analysis``, one per class)."""
    c = analysis.target_class if target_class is None else int(target_class)
    if analysis.gradients is not None and analysis.target_class == c:
        return analysis
    if analysis.loaded is None or analysis.input is None:
        raise ValueError("gradient rollout needs the analysis run with gradients=True")
    from vitviz.kinds.swin.analysis import analyze_swin

    cache: dict[int, SwinAnalysis] = vars(analysis).setdefault("_with_gradients", {})
    if c not in cache:
        cache.clear()  # one class kept: the window asks for one at a time
        cache[c] = analyze_swin(analysis.loaded.model, analysis.input, True, c)
    return cache[c]


def _query_token(analysis: SwinAnalysis, block: int, cell: tuple[int, int]) -> tuple[int, int]:
    """(token, stage) of block ``block``'s grid under the centre of first-stage cell ``cell``."""
    from vitviz.kinds.swin.attention import token_at

    stage = analysis.block_stages[block]
    point = ((cell[0] + 0.5) * analysis.patch_size, (cell[1] + 0.5) * analysis.patch_size)
    token = token_at(analysis.layouts[block], analysis.patch_size * 2**stage, point)
    return token, stage


def _version(name: str) -> Any:
    """The compute function of the Swin version of table method ``name``: (analysis, query cell
    of the first stage's grid or None for the average pool, target class, parameters) -> map
    (attention at its block's grid, Grad-CAM at the last stage's, the rollouts at the first
    stage's)."""

    def compute(
        analysis: SwinAnalysis,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> Tensor:
        model = analysis.loaded.model if analysis.loaded is not None else None
        source = analysis
        if name == "gradient-rollout":
            source = with_gradients(analysis, target_class)
            target_class = None
        token = None
        if query is not None:
            block = len(analysis.layouts) - 1
            if name == "attention":
                block = block_index(analysis, int(params.get("layer", -1)))
            token = _query_token(analysis, block, query)
        return swin_method_map(source, model, name, token, target_class, params)

    return compute


# The Swin kind's one declaration (DESIGN §5): its versions of the table's methods, each taking
# every parameter of its entry but those it refuses ...
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_version("attention")),
    "rollout": KindMethod(_version("rollout"), refusals=NOT_IN_WINDOWED_ROLLOUT),
    "gradient-rollout": KindMethod(_version("gradient-rollout"), refusals=NOT_IN_WINDOWED_ROLLOUT),
    "gradcam": KindMethod(gradcam_method, requires=_requires_own_swin),
}
# ... and what it can't run (``SwinKind.missing_method``), with why
CANNOT: dict[str, str] = dict.fromkeys(
    ("relevance", "dino-masks", "transformer-attribution", "grad-sam", "attention-gradcam"), NO_CLS
)
