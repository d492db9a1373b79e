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
    from vitviz.checkpoints import LoadedModel
    from vitviz.explain.methods import Method, TableView
    from vitviz.pipeline.export import MapSettings

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


def has_head(loaded: LoadedModel) -> bool:
    n = int(getattr(loaded.model.config, "num_classes", 0))
    return n > 0 and len(loaded.class_names) == n


def table_for(loaded: LoadedModel, layers: tuple[int, ...] | None = None) -> TableView:
    """The method table as ``loaded``'s model reads it keeping the model layers ``layers``
    (None: every layer): asked once, with the kind the model carries; the options are checked
    against it in one pass."""
    from vitviz.explain.methods import table_view

    return table_view(loaded.kind, loaded.model, has_head(loaded), layers)


def not_applicable(table: TableView) -> dict[str, str]:
    """{name: why} of the table's methods that can't run on the model."""
    return {name: why for name, why in table.unavailable.items() if why is not None}


def _method(table: TableView, name: str) -> Method:
    """The table's entry ``name``; the table's ValueError (listing the names) otherwise."""
    if name in table.methods:
        return table.methods[name]
    from vitviz.explain.methods import get_method

    return get_method(name)  # raises: not in the table


def choose_methods(names: Sequence[str] | None, table: TableView) -> tuple[Method, ...]:
    """The methods of ``--method`` (in order, each once), checked against the model and the
    layers kept (``--layers``, the table's ``layers``); CliError naming the methods that apply
    otherwise. None or empty: no method."""
    chosen: list[Method] = []
    for name in dict.fromkeys(names or ()):
        try:
            chosen.append(_method(table, name))
        except ValueError as exc:
            raise CliError(f"--method: {exc}") from exc
    for m in chosen:
        reason = table.unavailable[m.name]
        if reason is not None:
            usable = ", ".join(u.name for u in table.usable) or "none"
            where = "these layers" if table.layers is not None else "this model"
            raise CliError(f"--method {m.name}: {reason}; methods for {where}: {usable}")
    return tuple(chosen)


def parse_param_options(texts: Sequence[str] | None, table: TableView) -> dict[str, dict[str, Any]]:
    """``--param`` texts -> {method: {parameter: typed value}}, each parsed by its method's
    table entry; CliError naming the option otherwise."""
    out: dict[str, dict[str, Any]] = {}
    for text in texts or ():
        key, sep, value = text.partition("=")
        name, dot, param = key.strip().partition(".")
        if not sep or not dot or not name or not param:
            raise CliError(f"--param {text}: expected {PARAM_FORM}, e.g. rollout.discard_ratio=0.2")
        try:
            method = _method(table, name)
            out.setdefault(name, {}).update(method.parse_params({param: value}))
        except ValueError as exc:
            raise CliError(f"--param {text}: {exc}") from exc
    return out


def method_params(
    methods: Iterable[Method],
    params: Mapping[str, Mapping[str, Any]],
    shared: Mapping[str, Any],
    table: TableView,
) -> dict[str, dict[str, Any]]:
    """{method: the value of each parameter the kind's version takes} for ``methods``:
    ``shared`` values (e.g. --fusion) go to each method whose version takes a parameter of that
    name, ``params`` win over them; checked against the model's layers and heads (the table's
    ``bounds``), and a layer parameter against the layers kept (the table's ``layers``; None:
    every layer). CliError for a --param of a method not computed, or one the kind's version
    does not take (with the reason)."""
    methods = tuple(methods)
    num_layers, num_heads = table.bounds
    names = {m.name for m in methods}
    for name, given in params.items():
        if name not in names:
            asked = ", ".join(m.name for m in methods)
            raise CliError(
                f"--param {name}.{next(iter(given), '')}: {name} is not among the methods "
                f"computed here ({asked}); add --method {name}"
            )
    for name, given in params.items():
        for parameter in given:
            if parameter in table.refusals[name]:
                raise CliError(f"--param {table.refusals[name][parameter]}")
    out = {}
    for m in methods:
        own = set(table.taken[m.name])
        values = {k: v for k, v in shared.items() if k in own}
        values.update(params.get(m.name, {}))
        try:
            out[m.name] = m.values_for(table.kind, values, num_layers, num_heads)
        except ValueError as exc:
            raise CliError(
                f"{m.name}: {exc} (this model has {num_layers} layers of {num_heads} heads)"
            ) from exc
        if table.layers is not None:
            _check_layer_params(m, out[m.name], table.layers)
    return out


def _check_layer_params(m: Method, values: Mapping[str, Any], layers: tuple[int, ...]) -> None:
    """CliError for a layer parameter (e.g. attention.layer) naming a layer not kept."""
    from vitviz.core.layers import layers_text

    for p in m.parameters:
        value = values.get(p.name)
        if p.per == "layer" and p.name == "layer" and value != -1 and value not in layers:
            raise CliError(
                f"--param {m.name}.{p.name}={value}: layer {value} is not kept "
                f"(--layers keeps {layers_text(layers)}; -1 is the last of them)"
            )


# explain's options that set the table parameter of every method having it:
# (option, its attribute, the parameter, the option's default)
SHARED_OPTIONS = (
    ("--fusion", "fusion", "fusion", "mean"),
    ("--discard", "discard", "discard_ratio", 0.0),
    ("--start-layer", "start_layer", "start_layer", 0),
)


def shared_values(
    args: argparse.Namespace, computed: Sequence[Method], table: TableView
) -> dict[str, Any]:
    """{parameter: value} of --fusion, --discard and --start-layer. One given (not its
    default) that no computed method's version takes on this kind is refused in one line
    with the reason (a Swin's rollout has no discard step), never ignored."""
    out = {}
    for option, attribute, name, default in SHARED_OPTIONS:
        value = getattr(args, attribute)
        out[name] = value
        if value == default:
            continue
        having = [m for m in computed if any(p.name == name for p in m.parameters)]
        if having and all(name in table.refused[m.name] for m in having):
            why = table.refused[having[0].name][name]
            raise CliError(f"{option} {value} does not apply to a {table.kind.label}: {why}")
    return out


def map_settings(args: argparse.Namespace, loaded: LoadedModel) -> MapSettings:
    """explain's MapSettings from its options: --method, --param, and --fusion, --discard,
    --start-layer for every map computed whose version takes that parameter (today's maps
    included), all checked in one pass against the table as the model reads it."""
    from vitviz.pipeline.export import LEGACY_MAPS, MapSettings

    table = table_for(loaded, getattr(args, "kept_layers", None))  # --layers, parsed
    methods = choose_methods(args.methods, table)
    usable = {m.name for m in table.usable}
    today = [table.methods[name] for _key, name in LEGACY_MAPS if name in usable]
    computed = list({m.name: m for m in [*today, *methods]}.values())
    given = parse_param_options(args.params, table)
    shared = shared_values(args, computed, table)
    depth = table.bounds[0]
    if not 0 <= args.start_layer < depth:
        raise CliError(
            f"--start-layer {args.start_layer} is out of range: the model has "
            f"{depth} layers (0..{depth - 1})"
        )
    params = method_params(computed, given, shared, table)
    return MapSettings(
        args.fusion,
        args.discard,
        args.start_layer,
        args.target_class,
        methods=tuple(m.name for m in methods),
        params=params,
    )
