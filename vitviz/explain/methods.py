"""The one table of explanation methods (DESIGN §5): every method is one ``Method`` entry.

The window's method list and parameter controls, the CLI, export (npz keys, PNG names) and the
README's method list read this table and nothing else. Adding a method: one file in
``vitviz/explain/`` with its math, one ``register_method(Method(...))`` below, its tests.

A compute function takes (analysis, query, target_class, params) and returns a (gh, gw)
float32 map on the CPU, scaled as its entry's ``scaling`` says. ``query`` is a (row, col)
patch or None for CLS (the mean of the patch queries on a model without prefix tokens);
``target_class`` None means the top prediction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.attribution import attention_relevance
from vitviz.explain.fusion import FUSIONS
from vitviz.explain.gradcam import attention_gradcam, token_gradcam
from vitviz.explain.maps import attention_maps
from vitviz.explain.params import Parameter
from vitviz.explain.random_map import random_map
from vitviz.explain.rollout import relevance
from vitviz.explain.subject import Explained
from vitviz.explain.tokens import min_max_scale

Query = tuple[int, int] | None
Compute = Callable[[Explained, Query, "int | None", Mapping[str, Any]], Tensor]

VIT = "vit"  # vitviz's own VisionTransformer
MODEL_CODE = "model-code"  # a user's module run through vitviz.modelcode (attention captured)
SWIN = "swin"  # a Swin Transformer: its version of the method is in vitviz.kinds.swin.methods
SCALINGS = ("none", "max", "min-max", "share")
# The layers' attention a method reads: any (its layer parameter picks one kept layer, or it
# reads none), every (refused on an analysis that kept only some layers), last (the last one)
LAYER_NEEDS = ("any", "every", "last")
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def model_kind(model: object) -> str:
    """The kind a method's ``applies_to`` is matched against: the model's own ``model_kind``
    attribute where it has one (e.g. "swin"), "vit" for vitviz's ViT, else "model-code"."""
    from vitviz.model import VisionTransformer

    kind = getattr(model, "model_kind", None)
    if isinstance(kind, str):
        return kind
    return VIT if isinstance(model, VisionTransformer) else MODEL_CODE


@dataclass(frozen=True)
class Method:
    """One explanation method: what the window, the CLI and export need to know and run."""

    name: str  # fixed: CLI --method, npz key map_<name with - as _>, PNG <stem>_<name>.png
    label: str  # shown in the window's method list
    compute: Compute
    parameters: tuple[Parameter, ...] = ()
    needs_gradients: bool = False  # needs a classification head and a backward pass
    applies_to: frozenset[str] = frozenset({VIT})
    queries: bool = True  # a clicked patch (query) changes the map
    scaling: str = "none"  # none | max (divided by its max) | min-max | share (0..1 by nature)
    description: str = ""  # one line for `vitviz-cli methods` and the README
    needs_layers: str = "any"  # any | every | last (LAYER_NEEDS): of the layers kept

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"method name {self.name!r} must be lower-case words joined by '-' (e.g. grad-sam)"
            )
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {', '.join(SCALINGS)} (got {self.scaling!r})")
        if self.needs_layers not in LAYER_NEEDS:
            raise ValueError(
                f"needs_layers must be one of {', '.join(LAYER_NEEDS)} (got {self.needs_layers!r})"
            )
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"method {self.name!r} has a parameter name twice: {names}")
        object.__setattr__(self, "applies_to", frozenset(self.applies_to))

    @property
    def key(self) -> str:
        """The npz key of its map: map_<name with - as _>."""
        return "map_" + self.name.replace("-", "_")

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise ValueError(f"{self.name} has no parameter {name!r}; {self._accepted()}")

    def _accepted(self) -> str:
        if not self.parameters:
            return "it takes none"
        return "its parameters: " + ", ".join(p.name for p in self.parameters)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.parameters}

    def resolve(
        self,
        params: Mapping[str, Any] | None = None,
        *,
        strict: bool = True,
        num_layers: int | None = None,
        num_heads: int | None = None,
    ) -> dict[str, Any]:
        """Every parameter's value: ``params`` checked (bounds with the model's size where
        given), defaults for the rest. ``strict=False`` ignores names this method lacks, so one
        flat settings record can serve every method."""
        params = dict(params or {})
        unknown = sorted(set(params) - {p.name for p in self.parameters})
        if unknown and strict:
            raise ValueError(f"{self.name} has no parameter {unknown[0]!r}; {self._accepted()}")
        out = {}
        for p in self.parameters:
            value = params.get(p.name, p.default)
            out[p.name] = p.check(value, num_layers, num_heads)
        return out

    def parse_params(self, texts: Mapping[str, str]) -> dict[str, Any]:
        """{name: command-line text} -> {name: typed value}, checked."""
        return {name: self.parameter(name).parse(text) for name, text in texts.items()}

    def unavailable(self, analysis: Explained) -> str | None:
        """Why this method can't run on ``analysis`` (a plain sentence), or None if it can."""
        model = analysis.loaded.model if analysis.loaded is not None else None
        kept = getattr(analysis, "layers", None)  # a Swin's analysis keeps every block
        depth = getattr(analysis, "model_layers", None)
        return self.unavailable_on(model, analysis.has_head, kept, depth)

    def unavailable_on(
        self,
        model: object | None,
        has_head: bool,
        layers: tuple[int, ...] | None = None,
        depth: int | None = None,
    ) -> str | None:
        """Why this method can't run on ``model`` (None: no model attached; ``has_head``: it
        has a classification head with class names; ``layers``: the model layers kept of
        ``depth``, None for all), or None if it can. Lets the CLI refuse a method before any
        image is analysed."""
        kind = model_kind(model) if model is not None else None
        if kind is not None and kind not in self.applies_to:
            kinds = ", ".join(sorted(self.applies_to))
            return f"{self.label} applies to {kinds} models, not to this {kind} model"
        if layers is not None and depth is not None:
            reason = self.layers_missing(layers, depth)
            if reason is not None:
                return reason
        if self.needs_gradients:
            if not has_head:
                return f"{self.label} needs a classification head, and this model has none"
            if model is None:
                return f"{self.label} needs the model itself to compute gradients"
        return None

    def layers_missing(self, layers: tuple[int, ...], depth: int) -> str | None:
        """Why keeping only the model layers ``layers`` of ``depth`` leaves this method
        without what it reads (a sentence naming the missing layers), or None."""
        from vitviz.layers import layers_text

        missing = [i for i in range(depth) if i not in layers]
        if not missing or self.needs_layers == "any":
            return None
        kept = f"only layers {layers_text(layers)} of {depth} were kept"
        if self.needs_layers == "every":
            return f"{self.label} needs every layer, but {kept} (missing {layers_text(missing)})"
        if depth - 1 in missing:
            return f"{self.label} needs the last layer ({depth - 1}), but {kept}"
        return None

    def __call__(
        self,
        analysis: Explained,
        query: Query = None,
        target_class: int | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        strict: bool = True,
    ) -> Tensor:
        """The map of ``analysis`` for the query and class: (gh, gw) float32 on the CPU."""
        reason = self.unavailable(analysis)
        if reason is not None:
            raise ValueError(reason)
        if target_class is not None and analysis.has_head:
            n = analysis.logits.numel()
            if not 0 <= int(target_class) < n:
                raise ValueError(f"class {target_class} is out of range: 0..{n - 1}")
        depth = getattr(analysis, "model_layers", analysis.num_layers)  # layer params: model's
        values = self.resolve(params, strict=strict, num_layers=depth, num_heads=analysis.num_heads)
        out = self.compute(analysis, query, target_class, values)
        if out.shape != tuple(analysis.grid):
            raise RuntimeError(f"{self.name} gave a {tuple(out.shape)} map for {analysis.grid}")
        return out.detach().to("cpu", torch.float32)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (``vitviz-cli methods --json``)."""
        return {
            "name": self.name,
            "label": self.label,
            "key": self.key,
            "parameters": [p.to_dict() for p in self.parameters],
            "needs_gradients": self.needs_gradients,
            "applies_to": sorted(self.applies_to),
            "queries": self.queries,
            "scaling": self.scaling,
            "description": self.description,
            "needs_layers": self.needs_layers,
        }


# -- the registry -------------------------------------------------------------------------------

_REGISTRY: dict[str, Method] = {}


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add ``method`` to the table (at the end). A name already taken is refused unless
    ``replace``."""
    if method.name in _REGISTRY and not replace:
        raise ValueError(f"a method named {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a method (tests that register a toy one clean up with this)."""
    get_method(name)
    del _REGISTRY[name]


def get_method(name: str) -> Method:
    """The entry called ``name``; ValueError listing the accepted names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        accepted = ", ".join(_REGISTRY)
        raise ValueError(f"unknown method {name!r}; accepted: {accepted}") from None


def all_methods() -> tuple[Method, ...]:
    """Every registered method, in table order."""
    return tuple(_REGISTRY.values())


def method_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def methods_for(analysis: Explained) -> tuple[Method, ...]:
    """The methods that can run on ``analysis`` (its model kind, a head where needed)."""
    return tuple(m for m in _REGISTRY.values() if m.unavailable(analysis) is None)


def compute_maps(
    analysis: Explained,
    names: list[str] | tuple[str, ...],
    query: Query = None,
    target_class: int | None = None,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Tensor]:
    """{name: (gh, gw) map} for several methods; ``params`` per method name."""
    params = params or {}
    return {n: get_method(n)(analysis, query, target_class, params.get(n)) for n in names}


# -- shared helpers of the entries ----------------------------------------------------------------

_CACHE_ATTR = "_explain_cache"
_CACHE_SIZE = 4


def _cached(analysis: Explained, key: tuple, build: Callable[[], Any]) -> Any:
    """Per-analysis results that don't depend on the query (e.g. LRP per class), a few kept."""
    cache: dict[tuple, Any] = vars(analysis).setdefault(_CACHE_ATTR, {})
    if key not in cache:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = build()
    return cache[key]


def _class(analysis: Explained, target_class: int | None) -> int:
    return analysis.top_class if target_class is None else int(target_class)


def _model_input(analysis: Explained) -> tuple[Any, Tensor]:
    assert analysis.loaded is not None
    model = analysis.loaded.model
    p = next(model.parameters())
    return model, analysis.input[None].to(p.device, p.dtype)


def _head_index(value: int, maps: Tensor) -> Tensor:
    """(H, gh, gw) -> the head's map, or the mean over heads for -1."""
    return maps.mean(dim=0) if value == -1 else maps[value]


# -- the entries --------------------------------------------------------------------------------


def _layer_param(default: int = -1) -> Parameter:
    return Parameter(
        "layer", int, default, "Layer", range=(-1, None), per="layer", help="-1: the last layer"
    )


def _head_param() -> Parameter:
    return Parameter(
        "head", int, -1, "Head", range=(-1, None), per="head", help="-1: the mean of the heads"
    )


START_LAYER = Parameter(
    "start_layer", int, 0, "Start layer", range=(0, None), per="layer", help="first layer used"
)
DISCARD = Parameter(
    "discard_ratio", float, 0.0, "Discard ratio", range=(0.0, 0.99), step=0.05,
    help="share of the smallest attention entries zeroed per layer",
)  # fmt: skip


def _attention(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return _head_index(p["head"], a.attention_maps(p["layer"], q))


def _rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.rollout(q, p["fusion"], None, p["discard_ratio"], p["start_layer"])


def _gradient_rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.gradient_rollout(c, q, p["discard_ratio"], p["start_layer"])


def _relevance(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.relevance(c, q, p["start_layer"])


def _dino_masks(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    masks = a.dino_masks(p["layer"], p["threshold"], q).to(torch.float32)  # (H, gh, gw)
    return _head_index(p["head"], masks)


def _transformer_attribution(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    cls = _class(a, c)

    def build() -> tuple[list[Tensor], list[Tensor]]:
        model, x = _model_input(a)
        res = attention_relevance(model, x, cls)
        return res.relevances, res.gradients

    rel, grads = _cached(a, ("transformer-attribution", cls), build)
    return relevance(rel, grads, a.grid, a.num_prefix_tokens, a.query_token(q), p["start_layer"])[0]


def _grad_sam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    # mean_{l,h}(G⁺ ⊙ A) was summed in the gradient pass: the query's row of it
    total = a.gradient_products(c).grad_sam[:, None]  # (1, 1, N, N)
    rows = attention_maps(total, a.grid, a.num_prefix_tokens, a.query_token(q))[:, 0]
    return min_max_scale(rows)[0]


def _attention_gradcam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    g = a.gradient_products(c).last  # (1, H, N, N)
    attn = a.attention[-1].to(torch.float32)[None]
    return attention_gradcam(attn, g, a.grid, a.num_prefix_tokens, a.query_token(q))[0]


def _gradcam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    cls = _class(a, c)

    def build() -> Tensor:
        model, x = _model_input(a)
        return token_gradcam(model, x, cls)[0].cpu()

    return _cached(a, ("gradcam", cls), build).clone()  # the cached map stays as it is


def _random(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return random_map(a.grid, p["seed"])


ANY_VIT = frozenset({VIT, MODEL_CODE})
ANY_KIND = ANY_VIT | {SWIN}

BUILTIN_METHODS = (
    Method(
        "attention", "Attention (layer, head)", _attention,
        (_layer_param(), _head_param()),
        applies_to=ANY_KIND, scaling="none",
        description="raw attention of one layer: the query's row over the patches",
    ),
    Method(
        "rollout", "Attention rollout", _rollout,
        (Parameter("fusion", str, "mean", "Head fusion", choices=FUSIONS), DISCARD, START_LAYER),
        applies_to=ANY_KIND, scaling="max", needs_layers="every",
        description="Abnar & Zuidema 2020: product of the row-normalised (fused attention + I)",
    ),
    Method(
        "gradient-rollout", "Gradient rollout", _gradient_rollout, (DISCARD, START_LAYER),
        needs_gradients=True, applies_to=ANY_KIND, scaling="max", needs_layers="every",
        description="rollout of (mean over heads of attention ⊙ gradient)⁺",
    ),
    Method(
        "relevance", "Relevance (Chefer)", _relevance, (START_LAYER,),
        needs_gradients=True, applies_to=ANY_VIT, scaling="min-max", needs_layers="every",
        description="Chefer et al. 2021 generic attention explainability: Π (I + mean_h (∇A ⊙ A)⁺)",
    ),
    Method(
        "dino-masks", "DINO masks", _dino_masks,
        (
            _layer_param(),
            _head_param(),
            Parameter("threshold", float, 0.6, "Mask threshold", range=(0.05, 1.0), step=0.05),
        ),
        applies_to=ANY_VIT, scaling="share",
        description="per head, the fewest patches holding a share of the query's attention",
    ),
    Method(
        "transformer-attribution", "Transformer attribution (LRP)", _transformer_attribution,
        (START_LAYER,), needs_gradients=True, scaling="min-max", needs_layers="every",
        description="Chefer, Gur & Wolf 2021: LRP relevance of each attention map ⊙ its gradient, "
        "rolled out",
    ),
    Method(
        "grad-sam", "Grad-SAM", _grad_sam, (), needs_gradients=True, applies_to=ANY_VIT,
        scaling="min-max", needs_layers="every",
        description="Barkan et al. 2021: mean over layers and heads of ReLU(∇A) ⊙ A",
    ),
    Method(
        "attention-gradcam", "Grad-CAM on attention", _attention_gradcam, (),
        needs_gradients=True, applies_to=ANY_VIT, scaling="min-max", needs_layers="last",
        description="last layer's attention, each head weighted by its mean gradient; ReLU",
    ),
    Method(
        "gradcam", "Grad-CAM (tokens)", _gradcam, (), needs_gradients=True, queries=False,
        applies_to=frozenset({VIT, SWIN}), scaling="min-max",
        description="Grad-CAM on the last block's first LayerNorm output over the patch grid",
    ),
    Method(
        "random", "Random (baseline)", _random,
        (Parameter("seed", int, 0, "Seed", range=(0, 2**31 - 1)),),
        applies_to=ANY_KIND, queries=False, scaling="none",
        description="seeded uniform noise: the faithfulness baseline",
    ),
)  # fmt: skip

for _method in BUILTIN_METHODS:
    register_method(_method)

DEFAULT_METHODS = ("rollout", "gradient-rollout", "relevance")  # today's CLI set
