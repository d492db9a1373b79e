"""The one table of explanation methods (DESIGN §5): every method is one ``Method`` entry.

The window's method list and parameter controls, the CLI, export (npz keys, PNG names) and the
method list of docs/methods.md read this table and nothing else. An entry says what a method is
(name, label, parameters, scaling, description, and optionally a kind-independent ``compute``).
Which kinds run it and which of its parameters each takes is derived here (DESIGN §5), from the
one declaration of each kind (``vitviz/kinds/<kind>/methods.py``: ``METHODS`` {method:
``KindMethod``}, its own versions, each naming the table parameters it refuses and why; ``CANNOT``
{method: why}, what it can't run): a kind runs its own version, else the entry's ``compute``,
unless it says it can't. A version takes every parameter of its entry it does not refuse, so a
parameter added to an entry reaches every kind. The refusals (a method a kind can't run, a
parameter its version does not take) are sentences built here from the entry and the kind's
reason.

Adding a method (DESIGN §9): one ``Method`` entry below; a ``compute`` written for every kind
(over ``ModelKind.token_geometry``) costs nothing more; otherwise a line in ``METHODS`` (or
``CANNOT``) of each kind. A kind with neither has no version, and says so in the table's words.

A map comes back as float32 on the CPU over the grid of one of the kind's layers
(``TokenGeometry``: the clickable grid for every method of a ViT). ``query`` is a (row, col)
cell of the clickable grid or None (the CLS token, or the mean / the average pool where the
model has none); ``target_class`` None means the top prediction.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.explain.ablationcam import ablationcam_method
from vitviz.explain.cam_layer import LayerParameter, layer_parameter
from vitviz.explain.eigen_gradcam import eigen_gradcam_method
from vitviz.explain.eigencam import eigencam_method
from vitviz.explain.feature_methods import pca_method, similarity_method, token_norm_method
from vitviz.explain.fusion import FUSIONS
from vitviz.explain.gradcam import gradcam_method
from vitviz.explain.gradcam_elementwise import gradcam_elementwise_method
from vitviz.explain.gradcam_plusplus import gradcam_plusplus_method
from vitviz.explain.hirescam import hirescam_method
from vitviz.explain.layercam import layercam_method
from vitviz.explain.params import Parameter
from vitviz.explain.random_map import random_method
from vitviz.explain.scorecam import scorecam_method
from vitviz.explain.subject import Explained
from vitviz.explain.xgradcam import xgradcam_method
from vitviz.kindapi import KindAnalysis, KindMethod, ModelKind, all_kinds, get_kind, kind_of

Query = tuple[int, int] | None
Compute = Callable[[Any, Query, "int | None", Mapping[str, Any]], Tensor]

SCALINGS = ("none", "max", "min-max", "share")
# What a map is: scalar (gh, gw), shown through a colour map; rgb (gh, gw, 3) colours in [0, 1]
MAP_KINDS = ("scalar", "rgb")
# The layers' attention a method reads: any (its layer parameter picks one kept layer, or it
# reads none), every (refused on an analysis that kept only some layers), last (the last one)
LAYER_NEEDS = ("any", "every", "last")
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def model_kind(model: object) -> str:
    """The name of ``model``'s kind (``vitviz.kinds``): "vit", "swin", ... (a bare model handed
    to the Python API: the one place here that asks the registry to work it out)."""
    return kind_of(model).name


def carried_kind(analysis: KindAnalysis | Explained) -> ModelKind:
    """The kind ``analysis`` carries by name (``kind``, as the npz writes it): a look-up of
    the registered kind, never worked out again from the model (DESIGN §3)."""
    return get_kind(analysis.kind)


class Method:
    """One explanation method: what the window, the CLI and export need to know and run.

    ``compute`` (optional): a kind-independent version of the method, run on a kind without one
    of its own (a method registered at run time). ``applies_to`` (optional) restricts the
    entry to the kinds it names; without it an entry applies to every kind that implements it
    (or, with ``compute``, to every kind).
    """

    def __init__(
        self,
        name: str,  # fixed: CLI --method, npz key map_<name with - as _>, PNG <stem>_<name>.png
        label: str,  # shown in the window's method list
        compute: Compute | None = None,
        parameters: tuple[Parameter, ...] = (),
        *,
        needs_gradients: bool = False,  # needs a classification head and a backward pass
        needs_head: bool | None = None,  # scores a class: a classification head (None: as
        # needs_gradients)
        needs_model: bool | None = None,  # runs passes of the model itself (None: as needs_head)
        applies_to: Iterable[str] | None = None,
        queries: bool = True,  # a clicked patch (query) changes the map
        scaling: str = "none",  # none | max (divided by its max) | min-max | share (0..1)
        description: str = "",  # one line for `vitviz-cli methods` and docs/methods.md
        needs_layers: str = "any",  # any | every | last (LAYER_NEEDS): of the layers kept
        nearest: tuple[str, ...] = (),  # the methods closest to it, closest first (the
        # window shows the first one a model can run when it can't run this one)
        map_kind: str = "scalar",  # scalar (gh, gw) | rgb (gh, gw, 3) colours (MAP_KINDS)
        cost: str = "",  # what a map costs beyond the analysis ("" : the default for its needs)
    ) -> None:
        if not _NAME.match(name):
            raise ValueError(
                f"method name {name!r} must be lower-case words joined by '-' (e.g. grad-sam)"
            )
        if scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {', '.join(SCALINGS)} (got {scaling!r})")
        if needs_layers not in LAYER_NEEDS:
            raise ValueError(
                f"needs_layers must be one of {', '.join(LAYER_NEEDS)} (got {needs_layers!r})"
            )
        if map_kind not in MAP_KINDS:
            raise ValueError(f"map_kind must be one of {', '.join(MAP_KINDS)} (got {map_kind!r})")
        names = [p.name for p in parameters]
        if len(set(names)) != len(names):
            raise ValueError(f"method {name!r} has a parameter name twice: {names}")
        self.name = name
        self.label = label
        self.compute = compute
        self.parameters = tuple(parameters)
        self.needs_gradients = needs_gradients
        self.needs_head = needs_gradients if needs_head is None else needs_head
        self.needs_model = self.needs_head if needs_model is None else needs_model
        if needs_gradients and not (self.needs_head and self.needs_model):
            raise ValueError(f"method {name!r} needs gradients: it needs a head and the model")
        self.declared = None if applies_to is None else frozenset(applies_to)
        self.queries = queries
        self.scaling = scaling
        self.description = description
        self.needs_layers = needs_layers
        self.nearest = tuple(nearest)
        self.map_kind = map_kind
        self.cost = cost or (
            "a pass with gradients" if needs_gradients
            else "forward passes" if self.needs_model
            else "none: the analysis's attention"
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"Method({self.name!r}, {self.label!r})"

    @property
    def needs(self) -> str:
        """What a map needs beyond the analysis's attention, in the table's words: gradients
        (a head, the model and a backward pass), a head and the model (forward passes scoring
        the class, no gradient), the model (forward passes, no class) or attention only."""
        if self.needs_gradients:
            return "gradients"
        if self.needs_head:
            return "head + model, no gradients"
        if self.needs_model:
            return "model, no head, no gradients"
        return "attention only"

    @property
    def key(self) -> str:
        """The npz key of its map: map_<name with - as _>."""
        return "map_" + self.name.replace("-", "_")

    # -- which kinds ------------------------------------------------------------------------

    def implementation_for(self, kind: ModelKind) -> KindMethod | None:
        """``kind``'s version of this method: its own, else this entry's ``compute`` unless the
        kind says it can't run it (``missing_method``); None without either, or where
        ``applies_to`` (when given) does not name the kind."""
        if self.declared is not None and kind.name not in self.declared:
            return None
        own = kind.implementation(self.name)
        if own is not None:
            return own
        if self.compute is not None and kind.missing_method(self.name) is None:
            return KindMethod(self.compute)
        return None

    @property
    def applies_to(self) -> frozenset[str]:
        """The names of the kinds it runs on: those named at registration, else the
        registered kinds that implement it."""
        if self.declared is not None:
            return self.declared
        return frozenset(k.name for k in all_kinds() if self.implementation_for(k) is not None)

    def missing_on(self, kind: ModelKind) -> str | None:
        """Why ``kind`` has no version of this method (a sentence), None when it has one."""
        if self.implementation_for(kind) is not None:
            return None
        kinds = ", ".join(sorted(self.applies_to)) or "no registered"
        said = f"{self.label} applies to {kinds} models, not to this {kind.name} model"
        if self.declared is not None:
            if kind.name not in self.declared:
                return said  # the entry names its kinds: that is the reason
            said = f"{self.label} names {kind.name} models"
        why = kind.missing_method(self.name) or f"vitviz has no {kind.label} version of it"
        runs = ", ".join(m.name for m in all_methods() if m.implementation_for(kind) is not None)
        return f"{said}: {why} (it runs {runs or 'no method of the table'})"

    # -- parameters -------------------------------------------------------------------------

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

    def parameter_refusal(self, kind: ModelKind, parameter: str) -> str | None:
        """Why table parameter ``parameter`` means nothing to ``kind``'s version of this method
        (one sentence naming both and what the version takes, e.g. a Swin's rollout has no
        discard step), or None."""
        impl = self.implementation_for(kind)
        why = None if impl is None else impl.refusal(parameter)
        if why is None:
            return None
        taken = ", ".join(self.taken_parameters(kind)) or "no parameters"
        return (
            f"{self.name}.{parameter} does not apply to a {kind.label}: {why}; "
            f"its {self.name} takes {taken}"
        )

    def taken_parameters(self, kind: ModelKind) -> tuple[str, ...]:
        """The names of the table parameters ``kind``'s version reads (all without one)."""
        impl = self.implementation_for(kind)
        return tuple(
            p.name for p in self.parameters if impl is None or impl.takes_parameter(p.name)
        )

    def values_for(
        self,
        kind: ModelKind,
        given: Mapping[str, Any] | None = None,
        num_layers: int | None = None,
        num_heads: int | None = None,
        *,
        strict: bool = True,
    ) -> dict[str, Any]:
        """The values ``kind``'s version takes: ``given`` checked by the table (bounds from
        the model's size where given), defaults for the rest. A parameter that version does not
        take: ValueError saying why (``strict``), or dropped (the window, whose control for it
        is disabled)."""
        values = dict(given or {})
        for name in list(values):
            why = self.parameter_refusal(kind, name)
            if why is not None:
                if strict:
                    raise ValueError(why)
                del values[name]
        taken = self.taken_parameters(kind)
        resolved = self.resolve(values, num_layers=num_layers, num_heads=num_heads)
        return {k: v for k, v in resolved.items() if k in taken}

    # -- can it run -------------------------------------------------------------------------

    def unavailable(self, analysis: KindAnalysis | Explained) -> str | None:
        """Why this method can't run on ``analysis`` (a plain sentence), or None if it can."""
        loaded = getattr(analysis, "loaded", None)
        model = loaded.model if loaded is not None else None
        kept = getattr(analysis, "layers", None)  # None: every layer kept
        depth = getattr(analysis, "model_layers", None)
        has_head = bool(getattr(analysis, "has_head", analysis.logits.numel() > 0))
        return self._unavailable(carried_kind(analysis), model, has_head, kept, depth)

    def unavailable_on(
        self,
        model: nn.Module | None,
        has_head: bool,
        layers: tuple[int, ...] | None = None,
        depth: int | None = None,
        *,
        kind: ModelKind | None,
    ) -> str | None:
        """Why this method can't run on ``model`` of ``kind`` (the kind its LoadedModel carries;
        None with no model attached; ``has_head``: it has a classification head with class
        names; ``layers``: the model layers kept of ``depth``, None for all), or None if it
        can. Lets the CLI refuse a method before any image is analysed."""
        return self._unavailable(kind, model, has_head, layers, depth)

    def _unavailable(
        self,
        kind: ModelKind | None,
        model: nn.Module | None,
        has_head: bool,
        layers: tuple[int, ...] | None,
        depth: int | None,
    ) -> str | None:
        if kind is not None:
            missing = self.missing_on(kind)
            if missing is not None:
                return missing
        if layers is not None and depth is not None:
            reason = self.layers_missing(layers, depth)
            if reason is not None:
                return reason
        if self.needs_head and not has_head:
            return f"{self.label} needs a classification head, and this model has none"
        if self.needs_model and model is None:
            why = "to compute gradients" if self.needs_gradients else "for its forward passes"
            return f"{self.label} needs the model itself {why}"
        impl = None if kind is None else self.implementation_for(kind)
        return None if impl is None else impl.unavailable_on(self.label, model)

    def layers_missing(self, layers: tuple[int, ...], depth: int) -> str | None:
        """Why keeping only the model layers ``layers`` of ``depth`` leaves this method
        without what it reads (a sentence naming the missing layers), or None."""
        from vitviz.core.layers import layers_text

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
        analysis: KindAnalysis | Explained,
        query: Query = None,
        target_class: int | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        strict: bool = True,
    ) -> Tensor:
        """The map of ``analysis`` for the query and class: float32 on the CPU over the
        clickable grid (or, for a version that reads one layer, that layer's grid).
        ``strict=False``: parameters this method (or the kind's version) lacks are dropped."""
        reason = self.unavailable(analysis)
        if reason is not None:
            raise ValueError(reason)
        if target_class is not None and analysis.logits.numel() > 0:
            n = analysis.logits.numel()
            if not 0 <= int(target_class) < n:
                raise ValueError(f"class {target_class} is out of range: 0..{n - 1}")
        kind = carried_kind(analysis)
        impl = self.implementation_for(kind)
        assert impl is not None  # unavailable() said so otherwise
        layers, heads = kind.parameter_bounds(analysis)
        values = self.resolve(params, strict=strict, num_layers=layers, num_heads=heads)
        if not strict:
            values = {k: v for k, v in values.items() if impl.takes_parameter(k)}
        else:
            for name in params or {}:
                why = self.parameter_refusal(kind, name)
                if why is not None:
                    raise ValueError(why)
            values = {k: v for k, v in values.items() if impl.takes_parameter(k)}
        out = impl(analysis, query, target_class, values)
        geometry = kind.token_geometry(analysis)
        grids = {tuple(geometry.grid)} | {tuple(g.grid) for g in geometry.layers}
        shape = tuple(out.shape[:2]) if self.map_kind == "rgb" and out.ndim == 3 else out.shape
        if tuple(shape) not in grids or (self.map_kind == "rgb") != (out.ndim == 3):
            raise RuntimeError(f"{self.name} gave a {tuple(out.shape)} map for {geometry.grid}")
        return out.detach().to("cpu", torch.float32)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (``vitviz-cli methods --json``)."""
        return {
            "name": self.name,
            "label": self.label,
            "key": self.key,
            "parameters": [p.to_dict() for p in self.parameters],
            "needs_gradients": self.needs_gradients,
            "needs_head": self.needs_head,
            "needs_model": self.needs_model,
            "needs": self.needs,
            "applies_to": sorted(self.applies_to),
            "queries": self.queries,
            "scaling": self.scaling,
            "description": self.description,
            "needs_layers": self.needs_layers,
            "nearest": list(self.nearest),
            "map_kind": self.map_kind,
            "cost": self.cost,
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


def cam_methods() -> tuple[str, ...]:
    """The names of the methods that read a target layer (the CAM family, DESIGN §5)."""
    return tuple(
        m.name for m in all_methods() if any(isinstance(p, LayerParameter) for p in m.parameters)
    )


def ignored_parameters(kind: ModelKind) -> dict[str, dict[str, str]]:
    """{method: {table parameter ``kind``'s version does not take: why (a clause)}} over the
    methods the kind runs (the window disables their controls and says why)."""
    out = {}
    for method in all_methods():
        impl = method.implementation_for(kind)
        if impl is None:
            continue
        unused = {
            p.name: impl.refusal(p.name) or "its version does not take it"
            for p in method.parameters
            if not impl.takes_parameter(p.name)
        }
        if unused:
            out[method.name] = unused
    return out


@dataclass(frozen=True)
class TableView:
    """The method table as one model of one kind reads it, asked once (DESIGN §5), so that a
    whole request (the CLI's --method, --param and shared options) is checked against it in one
    pass instead of asking the table method by method.

    ``unavailable``: why each method can't run on the model keeping ``layers`` (None: it can);
    ``taken``: the table parameters each one's version reads; ``refused`` {method: {parameter:
    the kind's reason}} and ``refusals`` (the same as the table's sentence, naming both);
    ``bounds``: the model's (layers, heads) for the parameters' bounds."""

    kind: ModelKind
    methods: Mapping[str, Method]
    unavailable: Mapping[str, str | None]
    taken: Mapping[str, tuple[str, ...]]
    refused: Mapping[str, Mapping[str, str]]
    refusals: Mapping[str, Mapping[str, str]]
    bounds: tuple[int, int]
    layers: tuple[int, ...] | None = None

    @property
    def usable(self) -> tuple[Method, ...]:
        """The methods that can run, in table order."""
        return tuple(self.methods[n] for n, why in self.unavailable.items() if why is None)


def table_view(
    kind: ModelKind,
    model: nn.Module | None,
    has_head: bool,
    layers: tuple[int, ...] | None = None,
) -> TableView:
    """The table as ``model`` of ``kind`` (the kind its LoadedModel carries) reads it, keeping
    the model layers ``layers`` (None: every layer); ``has_head``: a classification head with
    class names."""
    bounds = kind.parameter_bounds(model) if model is not None else (0, 0)
    depth = bounds[0] if layers is not None else None
    methods = {m.name: m for m in all_methods()}
    unavailable, taken, refused, refusals = {}, {}, {}, {}
    for name, m in methods.items():
        unavailable[name] = m._unavailable(kind, model, has_head, layers, depth)
        taken[name] = m.taken_parameters(kind)
        impl = m.implementation_for(kind)
        raw = {p.name: impl.refusal(p.name) for p in m.parameters} if impl is not None else {}
        refused[name] = {p: why for p, why in raw.items() if why is not None}
        refusals[name] = {p: m.parameter_refusal(kind, p) or "" for p in refused[name]}
    return TableView(kind, methods, unavailable, taken, refused, refusals, bounds, layers)


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


GRADIENT_CAM_COST = "1 forward, 1 backward pass to its layer"
FEATURE_COST = "1 forward pass per image, kept while the analysis lives"
SLOW_CAM_COST = "1 + C forward passes (C its layer's channels), 16 at a time"

BUILTIN_METHODS = (
    Method(
        "attention", "Attention (layer, head)", None,
        (_layer_param(), _head_param()),
        scaling="none",
        description="raw attention of one layer: the query's row over the patches",
    ),
    Method(
        "rollout", "Attention rollout", None,
        (Parameter("fusion", str, "mean", "Head fusion", choices=FUSIONS), DISCARD, START_LAYER),
        scaling="max", needs_layers="every", nearest=("attention",),
        description="Abnar & Zuidema 2020: product of the row-normalised (fused attention + I)",
    ),
    Method(
        "gradient-rollout", "Gradient rollout", None, (DISCARD, START_LAYER),
        needs_gradients=True, scaling="max", needs_layers="every",
        nearest=("relevance", "rollout"),
        description="rollout of (mean over heads of attention ⊙ gradient)⁺",
    ),
    Method(
        "relevance", "Relevance (Chefer)", None, (START_LAYER,),
        needs_gradients=True, scaling="min-max", needs_layers="every",
        nearest=("transformer-attribution", "gradient-rollout", "grad-sam", "rollout"),
        description="Chefer et al. 2021 generic attention explainability: Π (I + mean_h (∇A ⊙ A)⁺)",
    ),
    Method(
        "dino-masks", "DINO masks", None,
        (
            _layer_param(),
            _head_param(),
            Parameter("threshold", float, 0.6, "Mask threshold", range=(0.05, 1.0), step=0.05),
        ),
        scaling="share", nearest=("attention",),
        description="per head, the fewest patches holding a share of the query's attention",
    ),
    Method(
        "transformer-attribution", "Transformer attribution (LRP)", None,
        (START_LAYER,), needs_gradients=True, scaling="min-max", needs_layers="every",
        nearest=("relevance", "gradient-rollout", "grad-sam", "rollout"),
        description="Chefer, Gur & Wolf 2021: LRP relevance of each attention map ⊙ its gradient, "
        "rolled out",
    ),
    Method(
        "grad-sam", "Grad-SAM", None, (), needs_gradients=True,
        scaling="min-max", needs_layers="every",
        nearest=("relevance", "attention-gradcam", "rollout"),
        description="Barkan et al. 2021: mean over layers and heads of ReLU(∇A) ⊙ A",
    ),
    Method(
        "attention-gradcam", "Grad-CAM on attention", None, (),
        needs_gradients=True, scaling="min-max", needs_layers="last",
        nearest=("gradcam", "grad-sam", "attention"),
        description="last layer's attention, each head weighted by its mean gradient; ReLU",
    ),
    Method(
        "gradcam", "Grad-CAM (tokens)", gradcam_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False,
        scaling="min-max", nearest=("attention-gradcam", "grad-sam", "rollout"),
        description="Grad-CAM on a layer's tokens over its grid (default auto: the last block's "
        "norm1 where it is a pre-norm, else the block's output)",
    ),
    Method(
        "random", "Random (baseline)", random_method,
        (Parameter("seed", int, 0, "Seed", range=(0, 2**31 - 1)),),
        queries=False, scaling="none",
        description="seeded uniform noise: the faithfulness baseline",
    ),
    Method(
        "token-norm", "Token norm", token_norm_method, (_layer_param(),),
        queries=False, scaling="none", needs_model=True, cost=FEATURE_COST,
        description="‖t_l‖₂ of each patch token after block l; high-norm: > median + 4·MAD",
    ),
    Method(
        "similarity", "Token similarity", similarity_method, (_layer_param(),),
        scaling="none", needs_model=True, cost=FEATURE_COST,
        description="cosine of the query token (CLS, mean or clicked patch) with each patch "
        "token after block l",
    ),
    Method(
        "pca", "PCA of features (RGB)", pca_method,
        (
            Parameter(
                "foreground", float, 0.0, "Foreground threshold", range=(0.0, 0.99), step=0.05,
                help="0: every patch; else the first component (scaled 0..1) above it",
            ),
        ),
        queries=False, scaling="min-max", map_kind="rgb", needs_model=True, cost=FEATURE_COST,
        description="first three principal components of the final-normed patch tokens as RGB",
    ),
    Method(
        "hirescam", "HiResCAM", hirescam_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max", nearest=("gradcam",),
        description="Draelos & Carin 2020: ReLU(Σ_k ∇A_k ⊙ A_k) on a layer's tokens",
    ),
    Method(
        "gradcam-plusplus", "Grad-CAM++", gradcam_plusplus_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max", nearest=("gradcam",),
        description="Chattopadhay et al. 2018: channels weighted by Σ α ReLU(∇A), "
        "α = g²/(2g² + ΣA·g³)",
    ),
    Method(
        "xgradcam", "XGrad-CAM", xgradcam_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max", nearest=("gradcam",),
        description="Fu et al. 2020: channels weighted by Σ ∇A ⊙ A / ΣA",
    ),
    Method(
        "layercam", "LayerCAM", layercam_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max", nearest=("gradcam",),
        description="Jiang et al. 2021: ReLU(Σ_k ReLU(∇A_k) ⊙ A_k)",
    ),
    Method(
        "gradcam-elementwise", "Grad-CAM (element-wise)", gradcam_elementwise_method,
        (layer_parameter(),), needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max",
        nearest=("hirescam", "gradcam"),
        description="Σ_k ReLU(∇A_k ⊙ A_k) on a layer's tokens",
    ),
    Method(
        "eigen-gradcam", "Eigen-Grad-CAM", eigen_gradcam_method, (layer_parameter(),),
        needs_gradients=True,
        cost=GRADIENT_CAM_COST, queries=False, scaling="min-max",
        nearest=("eigencam", "gradcam"),
        description="first principal component of ∇A ⊙ A over the grid; ReLU",
    ),
    Method(
        "eigencam", "Eigen-CAM", eigencam_method, (layer_parameter(),),
        needs_model=True, queries=False, scaling="min-max", cost="1 forward pass",
        nearest=("eigen-gradcam", "gradcam"),
        description="Muhammad & Yeasin 2020: first principal component of a layer's tokens; "
        "no class",
    ),
    Method(
        "scorecam", "Score-CAM", scorecam_method, (layer_parameter(),),
        needs_head=True, queries=False, scaling="min-max", nearest=("ablationcam", "gradcam"),
        description="Wang et al. 2020: channels weighted by the class's probability on the input "
        "masked by each", cost=SLOW_CAM_COST,
    ),
    Method(
        "ablationcam", "Ablation-CAM", ablationcam_method, (layer_parameter(),),
        needs_head=True, queries=False, scaling="min-max", nearest=("scorecam", "gradcam"),
        description="Desai & Ramaswamy 2020: channels weighted by the score's drop when each is "
        "zeroed", cost=SLOW_CAM_COST,
    ),
)  # fmt: skip

for _method in BUILTIN_METHODS:
    register_method(_method)

DEFAULT_METHODS = ("rollout", "gradient-rollout", "relevance")  # today's CLI set
