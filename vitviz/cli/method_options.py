"""The method table's options on the command line: ``--method`` / ``--param`` of ``explain`` and
``faithfulness``, and choosing the methods and their parameters for a model.

Everything here reads ``vitviz.explain.methods``; no method is named in this file.
``--param METHOD.PARAMETER=VALUE`` sets one parameter of one method (repeatable), e.g.
``--param rollout.discard_ratio=0.2 --param attention.layer=3``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.cli.common import CliError

if TYPE_CHECKING:  # the table imports torch: only when a command runs, not to parse arguments
    from vitviz.explain.methods import Method
    from vitviz.export import MapSettings

PARAM_FORM = "METHOD.PARAMETER=VALUE"


def add_method_options(p: argparse.ArgumentParser, default: str) -> None:
    """``--method NAME…`` (repeatable) and ``--param METHOD.PARAMETER=VALUE`` (repeatable)."""
    p.add_argument(
        "--method",
        dest="methods",
        action="extend",
        nargs="+",
        metavar="NAME",
        default=None,
        help=f"explanation method(s), repeatable; `vitviz-cli methods` lists them ({default})",
    )
    p.add_argument(
        "--param",
        dest="params",
        action="append",
        metavar=PARAM_FORM,
        default=None,
        help="one parameter of one method, repeatable, e.g. rollout.discard_ratio=0.2 or "
        "attention.layer=3 (`vitviz-cli methods` lists the parameters)",
    )


# -- choosing methods and their parameters ---------------------------------------------------------


def has_head(loaded: Any) -> bool:
    n = int(getattr(loaded.model.config, "num_classes", 0))
    return n > 0 and len(loaded.class_names) == n


def unavailable_on(m: Method, loaded: Any, layers: tuple[int, ...] | None = None) -> str | None:
    """Why ``m`` can't run on ``loaded``'s model keeping only the model layers ``layers`` (None:
    every layer), a plain sentence, or None if it can: the table's own check for a ViT, the Swin
    versions' (``swin_unavailable``) for a Swin."""
    head = has_head(loaded)
    if getattr(loaded.model, "model_kind", None) == "swin":
        from vitviz.kinds.swin.methods import swin_unavailable

        return swin_unavailable(m.name, m.label, head, loaded.model)
    depth = int(loaded.model.config.depth) if layers is not None else None
    return m.unavailable_on(loaded.model, head, layers, depth)


def applicable(loaded: Any, layers: tuple[int, ...] | None = None) -> tuple[Method, ...]:
    """The table's methods that can run on ``loaded``'s model (keeping only ``layers``)."""
    from vitviz.explain.methods import all_methods

    return tuple(m for m in all_methods() if unavailable_on(m, loaded, layers) is None)


def not_applicable(loaded: Any) -> dict[str, str]:
    """{name: why} of the table's methods that can't run on ``loaded``'s model."""
    from vitviz.explain.methods import all_methods

    reasons = {m.name: unavailable_on(m, loaded) for m in all_methods()}
    return {name: why for name, why in reasons.items() if why is not None}


def choose_methods(
    names: Sequence[str] | None, loaded: Any, layers: tuple[int, ...] | None = None
) -> tuple[Method, ...]:
    """The methods of ``--method`` (in order, each once), checked against the model and the
    layers kept (``--layers``); CliError naming the methods that apply otherwise. None or
    empty: no method."""
    from vitviz.explain.methods import get_method

    chosen: list[Method] = []
    for name in dict.fromkeys(names or ()):
        try:
            chosen.append(get_method(name))
        except ValueError as exc:
            raise CliError(f"--method: {exc}") from exc
    for m in chosen:
        reason = unavailable_on(m, loaded, layers)
        if reason is not None:
            usable = ", ".join(m.name for m in applicable(loaded, layers)) or "none"
            where = "these layers" if layers is not None else "this model"
            raise CliError(f"--method {m.name}: {reason}; methods for {where}: {usable}")
    return tuple(chosen)


def parse_param_options(texts: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """``--param`` texts -> {method: {parameter: typed value}}, each parsed by its method's
    table entry; CliError naming the option otherwise."""
    from vitviz.explain.methods import get_method

    out: dict[str, dict[str, Any]] = {}
    for text in texts or ():
        key, sep, value = text.partition("=")
        name, dot, param = key.strip().partition(".")
        if not sep or not dot or not name or not param:
            raise CliError(f"--param {text}: expected {PARAM_FORM}, e.g. rollout.discard_ratio=0.2")
        try:
            method = get_method(name)
            out.setdefault(name, {}).update(method.parse_params({param: value}))
        except ValueError as exc:
            raise CliError(f"--param {text}: {exc}") from exc
    return out


def method_params(
    methods: Iterable[Method],
    params: Mapping[str, Mapping[str, Any]],
    shared: Mapping[str, Any],
    num_layers: int,
    num_heads: int,
    layers: tuple[int, ...] | None = None,
) -> dict[str, dict[str, Any]]:
    """{method: every parameter's value} for ``methods``: ``shared`` values (e.g. --fusion) go
    to each method with a parameter of that name, ``params`` win over them; checked against the
    model's layers and heads, and a layer parameter against the layers kept (``layers``; None:
    every layer). CliError for a --param of a method not computed."""
    methods = tuple(methods)
    names = {m.name for m in methods}
    for name, given in params.items():
        if name not in names:
            asked = ", ".join(m.name for m in methods)
            raise CliError(
                f"--param {name}.{next(iter(given), '')}: {name} is not among the methods "
                f"computed here ({asked}); add --method {name}"
            )
    out = {}
    for m in methods:
        own = {p.name for p in m.parameters}
        values = {k: v for k, v in shared.items() if k in own}
        values.update(params.get(m.name, {}))
        try:
            out[m.name] = m.resolve(values, num_layers=num_layers, num_heads=num_heads)
        except ValueError as exc:
            raise CliError(
                f"{m.name}: {exc} (this model has {num_layers} layers of {num_heads} heads)"
            ) from exc
        if layers is not None:
            _check_layer_params(m, out[m.name], layers)
    return out


def _check_layer_params(m: Method, values: Mapping[str, Any], layers: tuple[int, ...]) -> None:
    """CliError for a layer parameter (e.g. attention.layer) naming a layer not kept."""
    from vitviz.layers import layers_text

    for p in m.parameters:
        value = values.get(p.name)
        if p.per == "layer" and p.name == "layer" and value != -1 and value not in layers:
            raise CliError(
                f"--param {m.name}.{p.name}={value}: layer {value} is not kept "
                f"(--layers keeps {layers_text(layers)}; -1 is the last of them)"
            )


def model_size(loaded: Any) -> tuple[int, int]:
    """(layers, heads) of the model, for the parameters' model bounds (a Swin: its blocks, and
    the most heads of a stage)."""
    cfg = loaded.model.config
    heads = cfg.heads
    return int(cfg.depth), int(max(heads) if isinstance(heads, (tuple, list)) else heads)


def map_settings(args: argparse.Namespace, loaded: Any) -> MapSettings:
    """explain's MapSettings from its options: --method, --param, and --fusion, --discard,
    --start-layer for every map computed that has that parameter (today's maps included)."""
    from vitviz.explain.methods import get_method
    from vitviz.export import LEGACY_MAPS, MapSettings

    kept = getattr(args, "kept_layers", None)  # --layers, parsed
    methods = choose_methods(args.methods, loaded, kept)
    usable = {m.name for m in applicable(loaded, kept)}
    today = [get_method(name) for _key, name in LEGACY_MAPS if name in usable]
    computed = list({m.name: m for m in [*today, *methods]}.values())
    shared = {"fusion": args.fusion, "discard_ratio": args.discard, "start_layer": args.start_layer}
    layers, heads = model_size(loaded)
    params = method_params(computed, parse_param_options(args.params), shared, layers, heads, kept)
    return MapSettings(
        args.fusion,
        args.discard,
        args.start_layer,
        args.target_class,
        methods=tuple(m.name for m in methods),
        params=params,
    )
